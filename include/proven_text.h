/*
 * proven_text.h: the text side of the proven engine: the tokenizer, chat prompts (rendering the
 * conversation, parsing what the model generated) and the sampler. A loaded model hands out its
 * tokenizer and chat template (pv_model_tokenizer, pv_model_chat_template in proven.h); a
 * tokenizer.json can also be opened on its own.
 *
 * Dependency: the chat functions take and return jansson values (json_t), so this header
 * includes <jansson.h>: a program that includes it compiles against jansson's headers (the
 * library links jansson in any case).
 *
 * Errors: a function that returns int returns 0 on success and -1 on failure, one that returns a
 * pointer returns NULL; either writes a one-line message into the caller's err buffer when it
 * takes one. Nothing here prints or exits.
 */
#ifndef PROVEN_TEXT_H
#define PROVEN_TEXT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Tokenizer ------------------------------------------------------------------------------------
 *
 * The Qwen byte-level BPE tokenizer (shared/docs/qwen-models.md §9).
 *
 * A struct pv_tok is immutable once built: any number of threads may encode and decode with one
 * tokenizer at the same time (every call allocates its own scratch).
 *
 * Encoding (what Hugging Face `tokenizers` does with the same tokenizer.json):
 *   1. Invalid UTF-8 in the input is replaced first (see below).
 *   2. Added tokens are matched before anything else, leftmost-longest, and are atomic. With
 *      parse_special = 1 every added token is matched; with parse_special = 0 only the
 *      non-special ones (`special: false` in tokenizer.json, USER_DEFINED in GGUF, e.g. <think>,
 *      <tool_call>) are, and the text of special tokens (<|im_start|>, ...) is tokenized as
 *      ordinary text. parse_special = 0 is HF's `encode_special_tokens = True` and llama.cpp's
 *      parse_special = false. No BOS/EOS is ever added.
 *   3. The text between added tokens is NFC-normalised (utf8proc) when tokenizer.json's
 *      normalizer is NFC (a tokenizer read from a GGUF file always is, as HF does for Qwen).
 *   4. It is split with the pre-tokenizer regex (PCRE2, UTF + UCP, JIT when available;
 *      leftmost-first; every match is a piece, as is any unmatched gap).
 *   5. Each piece's bytes go through GPT-2's bytes_to_unicode map and are merged by merge rank
 *      (lowest rank first, leftmost on ties), then looked up in the vocabulary.
 *
 * Regex dialect: tokenizer.json regexes are written for Oniguruma (what HF uses). PCRE2 runs them
 * verbatim except for two differences that proven corrects by rewriting the pattern:
 *   - `\s`: Oniguruma's set is U+0009-000D, U+0085 and the Zs/Zl/Zp characters; PCRE2's adds
 *     U+180E (MONGOLIAN VOWEL SEPARATOR). `\s` and `\S` outside brackets and `\s` inside are
 *     replaced by Oniguruma's explicit set.
 *   - Unicode versions: HF tokenizers 0.23's Oniguruma knows Unicode 16.0, Debian 12's PCRE2
 *     10.42 knows 14.0. `\p{L}`, `\p{N}`, `\p{M}` get the code points that Unicode 15.0-16.0
 *     added to those categories (a fixed table, made by tools/reference/make_tokenizer_corpus.py
 *     --class-table).
 * NFC: HF's normaliser has older Unicode tables than utf8proc (Unicode 15.0). The 109 code
 * points where that shows (marks from Unicode 10-15 that HF gives combining class 0, and
 * U+11930, whose composition U+11935 U+11930 -> U+11938 HF lacks) are copied through unchanged
 * and the text between them is normalised separately, which reproduces HF exactly (a fixed
 * table, from the same tool). Both tables assume Debian 12's libraries (PCRE2 10.42, utf8proc
 * 2.8); with newer ones the corpus test in tests/test_tokenizer.c shows whether they still hold.
 * Text without characters NFC could change skips utf8proc (a quick check built at load time).
 *
 * Invalid UTF-8 input: proven replaces every ill-formed sequence by U+FFFD, one U+FFFD per
 * "maximal subpart" (the W3C/Unicode practice; exactly what Python's
 * bytes.decode("utf-8", errors="replace") and Rust's String::from_utf8_lossy do), and then
 * tokenizes the repaired text. Overlong forms, surrogates (ED A0..BF ..), code points above
 * U+10FFFF, stray continuation bytes and truncated sequences all count as invalid. So encoding
 * raw bytes B gives the ids HF gives for B.decode("utf-8", "replace"). NUL bytes are ordinary
 * characters (the length is explicit).
 *
 * Decoding: each token's text is mapped back to bytes through the inverse byte map (a token with a
 * character outside the map, e.g. an added token containing a plain space, contributes its own
 * UTF-8 bytes, as HF's ByteLevel decoder does); the bytes are concatenated. By default invalid
 * UTF-8 in the result becomes U+FFFD per maximal subpart (HF's decode, errors="replace");
 * PV_TOK_DECODE_RAW returns the bytes untouched. The streaming decoder returns only complete
 * UTF-8 sequences and holds an incomplete one back until the next token completes it (or flush
 * replaces it); the concatenation of everything it returns equals pv_tok_decode of all the ids.
 */

struct pv_tok;
struct pv_tok_stream;

/* pv_tok_decode / pv_tok_stream_new flags */
#define PV_TOK_DECODE_SKIP_SPECIAL 1u /* drop special (CONTROL) tokens; non-special added tokens stay */
#define PV_TOK_DECODE_RAW 2u          /* pv_tok_decode only: no U+FFFD repair of the bytes            */

/* Opens a Hugging Face tokenizer.json, or a directory that contains one. Supported: model BPE
 * (no byte fallback, no continuing-subword prefix or end-of-word suffix, no dropout), normalizer
 * null or NFC, pre_tokenizer Sequence[Split(Regex, Isolated), ByteLevel(use_regex false)],
 * added tokens without lstrip/rstrip/single_word (added tokens marked `normalized: true` are
 * matched on the raw text like the others). Anything else is refused with a message. */
int pv_tok_open_json(struct pv_tok** out, const char* path, char* err, size_t errlen);

void pv_tok_free(struct pv_tok* t);

/* Number of ids (largest id + 1, added tokens included). */
int pv_tok_n_vocab(const struct pv_tok* t);
/* Id of a token given its stored text ("<|im_end|>", "user", "Ġworld"); -1 if there is none.
 * Added tokens are looked up first. */
int32_t pv_tok_id(const struct pv_tok* t, const char* token);
/* Stored text of an id (NUL-terminated), NULL if the id has none. */
const char* pv_tok_text(const struct pv_tok* t, int32_t id);
/* 1 for a special (CONTROL) added token, 0 otherwise. */
int pv_tok_is_special(const struct pv_tok* t, int32_t id);
/* The regex the splitter runs (as given, before proven's rewriting). */
const char* pv_tok_pattern(const struct pv_tok* t);

/* Encodes len bytes of text. On success *ids is a malloc'd array of *n ids (free() it; non-NULL
 * even when *n is 0). Fails only on out-of-memory, a text longer than 1 GiB, a regex engine
 * failure (a custom pattern hitting PCRE2's limits), or a byte with no token in a vocabulary that
 * lacks some of the 256 byte tokens (never with Qwen's). Long runs of one character class are
 * fine: the splitter is linear in the text, NFC's canonical reordering is a stable counting sort
 * of each run of combining marks (linear; utf8proc's own is quadratic in the run), the merge loop
 * O(n log n) per piece. */
int pv_tok_encode(const struct pv_tok* t, const char* text, size_t len, int parse_special, int32_t** ids,
                  int* n, char* err, size_t errlen);

/* A malloc'd, NUL-terminated copy of s[0, n) with every ill-formed UTF-8 sequence replaced by
 * U+FFFD exactly as pv_tok_encode replaces it (one per maximal subpart); NUL bytes are kept
 * (*out_len counts them). What a program does with text it must put in a JSON string or a chat
 * message (jansson refuses invalid UTF-8). NULL when out of memory. */
char* pv_utf8_repair(const char* s, size_t n, size_t* out_len);

/* Decodes n ids. On success *out is a malloc'd, NUL-terminated buffer of *len bytes (free() it).
 * Fails on an id outside [0, n_vocab) or an id with no text. */
int pv_tok_decode(const struct pv_tok* t, const int32_t* ids, int n, unsigned flags, char** out, size_t* len,
                  char* err, size_t errlen);

/* Streaming decoder. push returns the bytes that became complete with this token (possibly
 * none); flush returns what is held back, as U+FFFD. The returned pointer stays valid until the
 * next call on the stream. push fails (and changes nothing) on a bad id. */
int pv_tok_stream_new(struct pv_tok_stream** out, const struct pv_tok* t, unsigned flags);
int pv_tok_stream_push(struct pv_tok_stream* s, int32_t id, const char** bytes, size_t* len);
int pv_tok_stream_flush(struct pv_tok_stream* s, const char** bytes, size_t* len);
void pv_tok_stream_free(struct pv_tok_stream* s);

/* Chat -----------------------------------------------------------------------------------------
 *
 * Native rendering of Qwen chat prompts (no Jinja engine) and parsing of generated
 * assistant text back into reasoning, answer and tool calls.
 *
 * Dialects (one per official template; the texts are in tests/data/chat/, one .jinja file each):
 *   PV_CHAT_QWEN3    Qwen3 hybrid thinking (tokenizer_config.json of Qwen3): reasoning kept only
 *                    after the last user query, Hermes JSON tool calls, empty think block appended
 *                    to the generation prompt when thinking is off.
 *   PV_CHAT_QWEN3_5  Qwen3.5/3.6 (Qwen3.5-4B template): the generation prompt opens <think>, XML
 *                    tool calls <function=NAME><parameter=K>, contents trimmed, system message
 *                    only first, errors for a conversation without a user query.
 *   PV_CHAT_QWEN2_5  Qwen2.5-Instruct: default system prompt, Hermes JSON tool calls, no thinking.
 *
 * Rendering is byte-identical to transformers' apply_chat_template(..., tokenize=False) with the
 * real template (tests/test_chat.c checks every fixture), including tojson's spacing (", " and
 * ": "), key order as given, no ASCII escaping, and Python's float repr and str().
 *
 * Input: messages is a JSON array of OpenAI-style objects {role, content, reasoning_content,
 * tool_calls:[{function:{name, arguments}}]} (a tool call without the "function" wrapper is also
 * accepted, as the templates do). Roles: system, user, assistant, tool. tools is NULL or a JSON
 * array of tool definitions, rendered as given.
 *
 * Where the template would raise (or render garbage) on common client input, the renderer does:
 *   - qwen3, qwen2.5: content null or absent renders as "" (the templates raise on null);
 *     content given as a list of {"type":"text","text":...} parts renders as the texts joined.
 *   - qwen3.5: tool-call arguments given as a JSON string (OpenAI wire format) are parsed and
 *     rendered as the object (the template raises on a string).
 * and reports an error (the template would render something) for: an unknown role; image or
 * video parts in qwen3/qwen2.5 (their templates have no vision tokens); a non-string name or
 * reasoning_content; tool_calls that is not an array. Everything else the template raises on is
 * an error here too, with the template's message where it has one.
 */

enum pv_chat_dialect {
	PV_CHAT_QWEN3 = 0,
	PV_CHAT_QWEN3_5,
	PV_CHAT_QWEN2_5,
	PV_CHAT_DIALECT_COUNT
};

struct pv_chat_opts {
	int add_generation_prompt; /* append "<|im_start|>assistant\n" (+ think prefix)           */
	int enable_thinking;       /* 0: enable_thinking=false; nonzero: true (the default)        */
};

/* "qwen3", "qwen3.5", "qwen2.5" (also accepted: "qwen3_5", "qwen35", "qwen2_5", "qwen25"). -1 if
 * unknown. */
int pv_chat_dialect_from_name(const char* name);
const char* pv_chat_dialect_name(int dialect);

/* Picks the dialect from a chat template's text: "<function=" -> qwen3.5; "enable_thinking" ->
 * qwen3; "You are Qwen, created by Alibaba Cloud" -> qwen2.5; -1 if none matches. */
int pv_chat_detect_dialect(const char* template_text);

/* Renders the prompt. On success *out is a malloc'd NUL-terminated string (free() it) and *out_len
 * its length (the prompt has no NUL bytes unless the input strings had them); returns 0. On error
 * returns -1 with a one-line message in err. opts NULL: generation prompt off, thinking on. */
int pv_chat_render(int dialect, const json_t* messages, const json_t* tools,
                   const struct pv_chat_opts* opts, char** out, size_t* out_len,
                   char* err, size_t errlen);

/* Parsing generated assistant text ----------------------------------------------------------- */

enum {
	/* The prompt already opened the think block, so the text starts inside the reasoning (qwen3.5
	 * with thinking on: the generation prompt ends in "<think>\n"). */
	PV_CHAT_PARSE_IN_THINK = 1,
};

/* Splits the text the model generated after the generation prompt (up to, not including,
 * <|im_end|>) into a new JSON object:
 *   "content":            the answer text outside reasoning and tool calls, whitespace-trimmed
 *   "reasoning_content":  the text between <think> and </think>, whitespace-trimmed; null if none
 *   "tool_calls":         [{"type":"function","function":{"name":S,"arguments":S}}], arguments as a
 *                         JSON text (OpenAI wire format) written like the template's tojson
 *   "reasoning_complete": false when the think block was never closed (output cut off)
 *   "errors":             ["..."] problems found: unclosed think block, truncated or malformed tool
 *                         call (its raw text is left in "content"); empty when clean
 * qwen3/qwen2.5 read Hermes JSON tool calls; qwen3.5 reads XML calls, where parameter values are
 * strings unless tools (optional, the tool definitions) gives the parameter a JSON type (integer,
 * number, boolean, object, array, null), in which case the value is converted when it parses.
 * Never fails on odd text: returns NULL only for a bad dialect or out of memory (message in err). */
json_t* pv_chat_parse(int dialect, const char* text, size_t len, int flags, const json_t* tools,
                      char* err, size_t errlen);

/* Streaming parse: feed the generated text in pieces as it is produced; each call returns a new
 * JSON object with what became certain since the previous call, only the non-empty keys of
 *   "reasoning_content": S, "content": S, "tool_calls": [complete calls], "errors": [S]
 * ({} when nothing yet). Text that may still turn out to be a tag (a partial "</think>" or
 * "<tool_call>"), a cut UTF-8 character, leading whitespace and trailing whitespace are held back;
 * a tool call is reported once its </tool_call> arrived. Pass end=1 with the last piece (len may
 * be 0) to flush. Concatenating the deltas gives what pv_chat_parse returns for the whole text,
 * except that without PV_CHAT_PARSE_IN_THINK a "</think>" with no "<think>" before it is content
 * here (pv_chat_parse takes the text before it as reasoning). feed returns NULL only when out of
 * memory; after end=1 further input is ignored. */
typedef struct pv_chat_stream pv_chat_stream;
pv_chat_stream* pv_chat_stream_new(int dialect, int flags, const json_t* tools, char* err, size_t errlen);
json_t* pv_chat_stream_feed(pv_chat_stream* s, const char* text, size_t len, int end);
void pv_chat_stream_free(pv_chat_stream* s);

/* Sampler --------------------------------------------------------------------------------------
 *
 * Choosing the next token from a logits row: a function of the row and, when sampling, of
 * (seed, position) only. The draw is a counter-based hash of (seed, position), not a stream, so
 * speculative decoding, which evaluates rows out of the plain order or twice, draws the same
 * number for the same position and makes the same choice (proven_spec.h).
 *
 * temperature <= 0, or so small that 1/T overflows (below ~3e-39), or top_k 1: greedy, the lowest
 * id among the largest logits. Otherwise softmax(logits / T) restricted to the top_k ids (0: all),
 * then to ids whose probability is at least min_p times the top one (0: off), then to the
 * smallest set of most likely ids holding top_p of the mass (1: all; 0: the top id only, as
 * Hugging Face and llama.cpp do), and one draw picks among them. NaN logits never win; the set is
 * never empty. n_valid: ids at or above it are never chosen (padded vocabulary rows); 0: all. */
struct pv_sampling {
	float temperature;
	int top_k;
	float top_p;
	float min_p;
	uint64_t seed;
	int n_valid;
};

int pv_sampling_is_greedy(const struct pv_sampling* s);
/* Bytes of scratch pv_sample needs for a vocabulary of n_vocab (none when greedy). */
size_t pv_sample_scratch_bytes(int n_vocab);
/* The token at sequence position pos from logits[0, n_vocab). */
int32_t pv_sample(const struct pv_sampling* s, const float* logits, int n_vocab, int64_t pos, void* scratch);
/* The uniform draw in [0, 1) for (seed, pos) (24 bits). */
float pv_sample_uniform(uint64_t seed, int64_t pos);

#ifdef __cplusplus
}
#endif
#endif

/*
 * proven_wire.h: the messages of proven-server's local shared-memory protocol (proven_client.h is
 * the C client; this header is what another client would implement).
 *
 * A connection to the UNIX socket (SOCK_SEQPACKET, one message per send) is one remote session.
 * The client sends struct pvw_req, the server answers one struct pvw_rep. The first request is
 * PVW_HELLO; its reply carries, as SCM_RIGHTS ancillary data, the descriptor of the session's
 * shared-memory segment and the offsets of its areas:
 *
 *   tokens  int32 [n_ctx]             ids in: a run's rows, a prompt, text to detokenize
 *   out     int32 [n_ctx]             ids out: generated tokens, tokenized text
 *   argmax  int32 [max_rows]          per-row greedy ids of a run
 *   logits  float [max_rows, vocab]   per-row logits of a run
 *   hidden  float [max_rows, hidden]  per-row final-norm hidden rows of a run
 *   text    bytes [text_cap]          text in (tokenize) and out (detokenize)
 *
 * All integers are in the host's byte order: the protocol is local by construction.
 */
#ifndef PROVEN_WIRE_H
#define PROVEN_WIRE_H

#include <stdint.h>

#define PVW_MAGIC 0x31777670u /* "pvw1" */

enum pvw_op {
	PVW_HELLO = 1,  /* n_ctx, max_rows, n_snapshots -> the segment, the model's numbers          */
	PVW_RUN,        /* tokens[0, n), flags, want + rows0 -> pv_session_run's outputs               */
	PVW_SYNC,       /* tokens[0, n), flags, want -> the last row's outputs in row 0, reused        */
	PVW_TRUNCATE,   /* n                                                                          */
	PVW_ROLLBACK,   /* n                                                                          */
	PVW_CHECKPOINT, /*                                                                            */
	PVW_GENERATE,   /* prompt tokens[0, n), sampling, draft -> out[0, rep.n)                       */
	PVW_TOKENIZE,   /* text[0, n), parse_special -> out[0, rep.n)                                  */
	PVW_DETOKENIZE, /* tokens[0, n) -> text[0, rep.n)                                              */
};

enum { PVW_WANT_LOGITS = 1, PVW_WANT_ARGMAX = 2, PVW_WANT_HIDDEN = 4 };

struct pvw_req {
	uint32_t magic, op;
	int32_t n;
	uint32_t flags;                       /* PV_EVAL_*                                          */
	uint32_t want;                        /* PVW_WANT_*                                         */
	int32_t logits_row0, argmax_row0, hidden_row0;
	int32_t n_ctx, max_rows, n_snapshots; /* hello                                              */
	int32_t max_tokens, top_k, draft, draft_max, parse_special;
	float temperature, top_p, min_p;
	uint64_t seed;
};

struct pvw_rep {
	uint32_t magic, op;
	int32_t status;                       /* PV_OK or a pv_status                               */
	int32_t length;                       /* the session's length after the call                */
	int32_t n;                            /* rows, tokens or bytes written                      */
	int32_t reused;                       /* sync                                               */
	int32_t stopped_eos;                  /* generate                                           */
	int32_t vocab, hidden, n_ctx, max_rows;
	int64_t drafted, accepted;
	double server_ms;
	uint64_t shm_bytes, off_tokens, off_out, off_argmax, off_logits, off_hidden, off_text, text_cap;
	char model[128], arch[32];
	char err[256];
};

#endif

/*
 * template.c: `proven template`: renders a chat conversation into the exact prompt text the model's
 * chat template produces (include/proven_text.h), printed as is (no newline added).
 *
 *   proven template --tokenizer PATH --messages FILE.json [--tools FILE.json] [--no-thinking]
 *                   [--generation-prompt] [--dialect qwen3|qwen3.5|qwen2.5]
 *
 * PATH: a Hugging Face directory (chat_template.jinja, tokenizer_config.json's chat_template, or
 * chat_template.json), a tokenizer.json or tokenizer_config.json inside one, or a .jinja file. The
 * dialect is recognised from the template text; --dialect overrides it (and is required for GGUF
 * files for now). FILE.json holds the messages array, or a chat-completion request body
 * {"messages": [...], "tools": [...]}.
 */
#include "cli.h"
#include "proven.h"
#include "proven_text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FILE (64u << 20)

/* Reads a whole file (NUL-terminated); NULL with a message on stderr (a directory or a device is
 * refused before it is read). */
static char* slurp(const char* path, size_t* len)
{
	return cli_read_input("template", path, MAX_FILE, len);
}

static json_t* load_json(const char* path)
{
	size_t n;
	char* s = slurp(path, &n);
	if (!s) return NULL;
	json_error_t je;
	json_t* j = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
	free(s);
	if (!j) fprintf(stderr, "proven template: %s: invalid JSON at line %d: %s\n", path, je.line, je.text);
	return j;
}

static int ends_with(const char* s, const char* suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

static int is_dir(const char* p)
{
	struct stat st;
	return !stat(p, &st) && S_ISDIR(st.st_mode);
}

static int exists(const char* p)
{
	struct stat st;
	return !stat(p, &st);
}

/* The chat template text of a tokenizer_config.json / chat_template.json document (malloc'd), or
 * NULL (message printed when the file has a template key of the wrong shape). */
static char* template_from_config(const char* path)
{
	json_t* j = load_json(path);
	if (!j) return NULL;
	const json_t* t = json_object_get(j, "chat_template");
	char* out = NULL;
	if (json_is_string(t)) {
		out = strdup(json_string_value(t));
	} else if (json_is_array(t)) {
		/* [{"name": "default", "template": "..."}, {"name": "tool_use", ...}] */
		size_t i;
		json_t* e;
		const json_t* pick = NULL;
		json_array_foreach(t, i, e) {
			const json_t* nm = json_object_get(e, "name");
			if (!pick || (json_is_string(nm) && !strcmp(json_string_value(nm), "default"))) pick = e;
		}
		const json_t* tt = json_object_get(pick, "template");
		if (json_is_string(tt)) out = strdup(json_string_value(tt));
	}
	if (!out && t) fprintf(stderr, "proven template: %s: chat_template is neither a string nor a list of named templates\n", path);
	json_decref(j);
	return out;
}

/* Finds the chat template for PATH; NULL with a message when there is none. */
static char* find_template(const char* path)
{
	char p[4096];
	if (is_dir(path)) {
		static const char* const names[] = { "chat_template.jinja", "tokenizer_config.json", "chat_template.json" };
		for (size_t i = 0; i < 3; i++) {
			snprintf(p, sizeof p, "%s/%s", path, names[i]);
			if (!exists(p)) continue;
			struct stat st;
			if (stat(p, &st) || !S_ISREG(st.st_mode)) { /* a FIFO in a directory must not block */
				fprintf(stderr, "proven template: %s is not a regular file\n", p);
				return NULL;
			}
			char* t = i == 0 ? slurp(p, NULL) : template_from_config(p);
			if (t) return t;
		}
		fprintf(stderr, "proven template: %s has no chat template (looked for chat_template.jinja, "
		                "tokenizer_config.json, chat_template.json)\n", path);
		return NULL;
	}
	if (!exists(path)) {
		fprintf(stderr, "proven template: %s: %s\n", path, strerror(errno));
		return NULL;
	}
	if (ends_with(path, ".gguf")) {
		/* tokenizer.chat_template, through the model loader (the file is only mapped) */
		char err[512];
		pv_model* m = NULL;
		if (pv_model_open(&m, path, NULL, err, sizeof err)) {
			fprintf(stderr, "proven template: cannot load %s: %s\n", path, err);
			return NULL;
		}
		const char* t = pv_model_chat_template(m);
		char* copy = t ? strdup(t) : NULL;
		pv_model_close(m);
		if (!copy) fprintf(stderr, "proven template: %s has no tokenizer.chat_template\n", path);
		return copy;
	}
	if (ends_with(path, ".jinja")) return slurp(path, NULL);
	if (ends_with(path, "tokenizer_config.json") || ends_with(path, "chat_template.json")) {
		char* t = template_from_config(path);
		if (!t) fprintf(stderr, "proven template: %s has no chat_template\n", path);
		return t;
	}
	/* tokenizer.json or another file: look in its directory */
	snprintf(p, sizeof p, "%s", path);
	char* slash = strrchr(p, '/');
	if (slash) *slash = 0;
	else snprintf(p, sizeof p, ".");
	return find_template(p);
}

int cmd_template(int argc, char** argv)
{
	const char *tok = NULL, *msgs_path = NULL, *tools_path = NULL, *dname = NULL;
	struct pv_chat_opts o = { .add_generation_prompt = 0, .enable_thinking = 1 };
	for (int i = 1; i < argc; i++) {
		const char* a = argv[i];
		int has_val = i + 1 < argc;
		if (cli_is_help(a)) return cli_usage("template", stdout);
		if (!strcmp(a, "--tokenizer") && has_val) tok = argv[++i];
		else if (!strcmp(a, "--messages") && has_val) msgs_path = argv[++i];
		else if (!strcmp(a, "--tools") && has_val) tools_path = argv[++i];
		else if (!strcmp(a, "--dialect") && has_val) dname = argv[++i];
		else if (!strcmp(a, "--no-thinking")) o.enable_thinking = 0;
		else if (!strcmp(a, "--generation-prompt")) o.add_generation_prompt = 1;
		else if (!strcmp(a, "--tokenizer") || !strcmp(a, "--messages") || !strcmp(a, "--tools") || !strcmp(a, "--dialect")) {
			fprintf(stderr, "proven template: option %s needs a value\n", a);
			return 2;
		} else {
			fprintf(stderr, "proven template: unknown option %s\n", a);
			return 2;
		}
	}
	if (!msgs_path) {
		fprintf(stderr, "proven template: --messages FILE.json is required\n");
		return 2;
	}
	if (!tok && !dname) {
		fprintf(stderr, "proven template: --tokenizer PATH (or --dialect) is required\n");
		return 2;
	}
	int dialect = -1;
	if (dname) {
		dialect = pv_chat_dialect_from_name(dname);
		if (dialect < 0) {
			fprintf(stderr, "proven template: unknown dialect \"%s\" (qwen3, qwen3.5 or qwen2.5)\n", dname);
			return 2;
		}
	} else {
		char* t = find_template(tok);
		if (!t) return 1;
		dialect = pv_chat_detect_dialect(t);
		free(t);
		if (dialect < 0) {
			fprintf(stderr, "proven template: the chat template of %s is not a known Qwen template; pass --dialect\n", tok);
			return 1;
		}
	}

	json_t* doc = load_json(msgs_path);
	if (!doc) return 1;
	json_t* tools = NULL;
	const json_t* messages = doc;
	if (json_is_object(doc)) {
		messages = json_object_get(doc, "messages");
		if (!messages) {
			fprintf(stderr, "proven template: %s: an object must have a \"messages\" array\n", msgs_path);
			json_decref(doc);
			return 1;
		}
		tools = json_incref(json_object_get(doc, "tools"));
	}
	if (tools_path) {
		json_decref(tools);
		tools = load_json(tools_path);
		if (!tools) {
			json_decref(doc);
			return 1;
		}
	}
	char err[512];
	char* out;
	size_t n;
	int rc = pv_chat_render(dialect, messages, tools, &o, &out, &n, err, sizeof err);
	json_decref(tools);
	json_decref(doc);
	if (rc) {
		fprintf(stderr, "proven template: %s\n", err);
		return 1;
	}
	fwrite(out, 1, n, stdout); /* a short write sets the error flag */
	free(out);
	if (cli_stdout_failed("template")) return 1;
	return 0;
}

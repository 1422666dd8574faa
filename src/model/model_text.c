/*
 * model_text.c: what a model directory says about text: the tokenizer (tokenizer.json), the chat
 * template (tokenizer_config.json "chat_template" or chat_template.jinja) and the
 * end-of-generation ids (generation_config.json, config.json, and the ChatML end tokens).
 * Everything is optional; a file that is present but broken (or not a regular file) is an error.
 */
#include "model/model.h"
#include "text/tokenizer.h"
#include "format/json_util.h"
#include "base/file.h"
#include "base/util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pv_model_add_eos(struct pv_model* m, int32_t id)
{
	if (id < 0 || m->n_eos == (int)(sizeof(m->eos) / sizeof(m->eos[0]))) return;
	for (int i = 0; i < m->n_eos; i++)
		if (m->eos[i] == id) return;
	m->eos[m->n_eos++] = id;
}

#define MAX_SIDE_FILE (64u << 20)

/* Anything at path, a dangling or looping link included (reading it then says what is wrong). */
static int present(const char* path)
{
	return pv_path_kind(path, NULL) != PV_PATH_ABSENT;
}

/* eos_token_id: an integer or a list of integers, possibly under text_config. */
static int eos_from_json(struct pv_model* m, const char* path, char* err, size_t errlen)
{
	if (!present(path)) return 0;
	json_t* j = pv_json_read_file(path, MAX_SIDE_FILE, 0, err, errlen);
	if (!j) return -1;
	json_t* v = json_object_get(j, "eos_token_id");
	if (!v && json_is_object(json_object_get(j, "text_config")))
		v = json_object_get(json_object_get(j, "text_config"), "eos_token_id");
	if (json_is_integer(v)) pv_model_add_eos(m, (int32_t)json_integer_value(v));
	for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++)
		if (json_is_integer(json_array_get(v, i))) pv_model_add_eos(m, (int32_t)json_integer_value(json_array_get(v, i)));
	json_decref(j);
	return 0;
}

int pv_model_text_hf(struct pv_model* m, const char* dir, char* err, size_t errlen)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
	if (present(path) && pv_tok_open_json(&m->tok, path, err, errlen)) return -1;
	if (m->tok && pv_tok_n_vocab(m->tok) > m->cfg.vocab)
		return pv_errf(err, errlen, "%s: the tokenizer has %d ids but the model's embedding has only %d rows", path,
		               pv_tok_n_vocab(m->tok), m->cfg.vocab);

	snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
	if (present(path)) {
		json_t* j = pv_json_read_file(path, MAX_SIDE_FILE, 0, err, errlen);
		if (!j) return -1;
		json_t* t = json_object_get(j, "chat_template");
		if (json_is_string(t)) m->chat_template = pv_xstrdup(json_string_value(t));
		/* the list form: [{"name": "default", "template": "..."}, ...] */
		for (size_t i = 0; json_is_array(t) && i < json_array_size(t) && !m->chat_template; i++) {
			json_t* e = json_array_get(t, i);
			const char* name = json_string_value(json_object_get(e, "name"));
			if (name && !strcmp(name, "default") && json_is_string(json_object_get(e, "template")))
				m->chat_template = pv_xstrdup(json_string_value(json_object_get(e, "template")));
		}
		json_t* eos = json_object_get(j, "eos_token");
		const char* eos_s = json_is_string(eos) ? json_string_value(eos) : json_string_value(json_object_get(eos, "content"));
		if (eos_s && m->tok) pv_model_add_eos(m, pv_tok_id(m->tok, eos_s));
		json_decref(j);
	}
	snprintf(path, sizeof(path), "%s/chat_template.jinja", dir);
	if (!m->chat_template && present(path) && !(m->chat_template = pv_file_read(path, MAX_SIDE_FILE, NULL, err, errlen)))
		return -1;

	snprintf(path, sizeof(path), "%s/generation_config.json", dir);
	if (eos_from_json(m, path, err, errlen)) return -1;
	snprintf(path, sizeof(path), "%s/config.json", dir);
	if (eos_from_json(m, path, err, errlen)) return -1;
	if (m->tok) {
		pv_model_add_eos(m, pv_tok_id(m->tok, "<|im_end|>"));
		pv_model_add_eos(m, pv_tok_id(m->tok, "<|endoftext|>"));
	}
	return 0;
}

void pv_model_text_free(struct pv_model* m)
{
	pv_tok_free(m->tok);
	free(m->chat_template);
	m->tok = NULL;
	m->chat_template = NULL;
}

const struct pv_tok* pv_model_tokenizer(const pv_model* m) { return m->tok; }
const char* pv_model_chat_template(const pv_model* m) { return m->chat_template; }
int pv_model_eos(const pv_model* m, const int32_t** ids)
{
	*ids = m->eos;
	return m->n_eos;
}

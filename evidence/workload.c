/*
 * workload.c: the identity of a workload prompt. A prompt is its messages and its tools; its
 * digest is the sha256 of {"messages": ..., "tools": ...} as canonical JSON (sorted keys, compact,
 * UTF-8 as is), so the same prompt gives the same digest whatever file or machine it came from.
 */
#include "evidence.h"

void ev_prompt_digest(const json_t* prompt, char hex[65])
{
	json_t* t = json_object_get(prompt, "tools");
	json_t* c = json_pack("{s:O,s:O}", "messages", json_object_get(prompt, "messages") ? json_object_get(prompt, "messages") : json_null(),
	                      "tools", t ? t : json_null());
	ev_sha256_json(c, hex);
	json_decref(c);
}

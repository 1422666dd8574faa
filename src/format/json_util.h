/*
 * json_util.h: jansson helpers shared by the JSON readers (the safetensors header here,
 * config.json in model/, the tokenizer's and the model directory's side files).
 */
#ifndef PV_JSON_UTIL_H
#define PV_JSON_UTIL_H

#include <jansson.h>

/* What a value is, for messages about a value of the wrong type ("... is an array"). */
static inline const char* pv_json_kind(const json_t* v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a real number";
	case JSON_TRUE: return "true";
	case JSON_FALSE: return "false";
	default: return "null";
	}
}

/* A JSON file of at most max bytes (jansson decoding flags), read with pv_file_read (a FIFO, a
 * device or a directory fails at once); NULL with "PATH: not valid JSON (line L, column C): ..."
 * or the reading error. */
json_t* pv_json_read_file(const char* path, size_t max, size_t flags, char* err, size_t errlen);

#endif

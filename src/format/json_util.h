/*
 * json_util.h: jansson helpers shared by the JSON readers (the safetensors header here,
 * config.json in model/).
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

#endif

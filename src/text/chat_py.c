/*
 * chat_py.c: the Python semantics the chat templates rely on, reproduced byte for byte:
 * str.strip() with Python's whitespace set (Jinja's trim), json.dumps as transformers' tojson
 * calls it (ensure_ascii=False, default separators, keys in the given order), float repr and
 * str() of values.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "text/chat_internal.h"

/* Python's str.isspace() set (what str.strip() and Jinja's trim remove). */
static int py_isspace(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202f || c == 0x205f || c == 0x3000;
}

struct strview pv_py_rstrip(struct strview s)
{
	uint32_t cp;
	while (s.n) {
		size_t st = pv_utf8_last(s.p, s.n, &cp);
		if (!py_isspace(cp)) break;
		s.n = st;
	}
	return s;
}

struct strview pv_py_strip(struct strview s)
{
	uint32_t cp;
	while (s.n) {
		size_t l = pv_utf8_decode(s.p, s.n, &cp);
		if (!py_isspace(cp)) break;
		s.p += l;
		s.n -= l;
	}
	return pv_py_rstrip(s);
}

/* Python float repr (shortest round-trip digits; exponent form when the decimal point position
 * is <= -4 or > 16), and json.dumps' spelling of the non-finite values. */
static void py_float(struct strbuf* b, double v, int for_json)
{
	char tmp[40], out[48];
	if (isnan(v)) {
		strbuf_puts(b, for_json ? "NaN" : "nan");
		return;
	}
	if (isinf(v)) {
		strbuf_puts(b, v < 0 ? (for_json ? "-Infinity" : "-inf") : (for_json ? "Infinity" : "inf"));
		return;
	}
	if (v == 0) {
		strbuf_puts(b, signbit(v) ? "-0.0" : "0.0");
		return;
	}
	for (int p = 1; p <= 17; p++) {
		snprintf(tmp, sizeof tmp, "%.*e", p - 1, v);
		if (strtod(tmp, NULL) == v) break;
	}
	/* tmp: [-]d[.ddd]e[+-]XX */
	char digits[24];
	int nd = 0, neg = 0;
	const char* q = tmp;
	if (*q == '-') neg = 1, q++;
	for (; *q && *q != 'e'; q++)
		if (*q >= '0' && *q <= '9' && nd < 20) digits[nd++] = *q;
	int e = atoi(q + 1);
	while (nd > 1 && digits[nd - 1] == '0') nd--;
	digits[nd] = 0;
	int decpt = e + 1;
	size_t o = 0;
	if (neg) out[o++] = '-';
	if (decpt > -4 && decpt <= 16) {
		if (decpt <= 0) {
			out[o++] = '0';
			out[o++] = '.';
			for (int i = 0; i < -decpt; i++) out[o++] = '0';
			for (int i = 0; i < nd; i++) out[o++] = digits[i];
		} else if (decpt >= nd) {
			for (int i = 0; i < nd; i++) out[o++] = digits[i];
			for (int i = nd; i < decpt; i++) out[o++] = '0';
			out[o++] = '.';
			out[o++] = '0';
		} else {
			for (int i = 0; i < nd; i++) {
				if (i == decpt) out[o++] = '.';
				out[o++] = digits[i];
			}
		}
		out[o] = 0;
	} else {
		out[o++] = digits[0];
		if (nd > 1) {
			out[o++] = '.';
			for (int i = 1; i < nd; i++) out[o++] = digits[i];
		}
		snprintf(out + o, sizeof out - o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
	}
	strbuf_puts(b, out);
}

/* json.dumps string literal with ensure_ascii=False. */
static void py_json_str(struct strbuf* b, struct strview s)
{
	strbuf_put(b, "\"", 1);
	size_t run = 0;
	for (size_t i = 0; i < s.n; i++) {
		unsigned char c = (unsigned char)s.p[i];
		const char* esc = NULL;
		char u[8];
		if (c == '"') esc = "\\\"";
		else if (c == '\\') esc = "\\\\";
		else if (c == '\n') esc = "\\n";
		else if (c == '\r') esc = "\\r";
		else if (c == '\t') esc = "\\t";
		else if (c == '\b') esc = "\\b";
		else if (c == '\f') esc = "\\f";
		else if (c < 0x20) {
			snprintf(u, sizeof u, "\\u%04x", c);
			esc = u;
		}
		if (esc) {
			strbuf_put(b, s.p + run, i - run);
			strbuf_puts(b, esc);
			run = i + 1;
		}
	}
	strbuf_put(b, s.p + run, s.n - run);
	strbuf_put(b, "\"", 1);
}

/* transformers' tojson: json.dumps(x, ensure_ascii=False) (separators ", " and ": "). */
int pv_py_json(struct strbuf* b, const json_t* v, int depth)
{
	char num[32];
	if (depth > 512) return -1;
	switch (json_typeof(v)) {
	case JSON_OBJECT: {
		const char* k;
		json_t* x;
		int first = 1;
		strbuf_put(b, "{", 1);
		json_object_foreach((json_t*)v, k, x) {
			if (!first) strbuf_put(b, ", ", 2);
			first = 0;
			py_json_str(b, strview_of(k));
			strbuf_put(b, ": ", 2);
			if (pv_py_json(b, x, depth + 1)) return -1;
		}
		strbuf_put(b, "}", 1);
		return 0;
	}
	case JSON_ARRAY: {
		size_t i;
		json_t* x;
		strbuf_put(b, "[", 1);
		json_array_foreach(v, i, x) {
			if (i) strbuf_put(b, ", ", 2);
			if (pv_py_json(b, x, depth + 1)) return -1;
		}
		strbuf_put(b, "]", 1);
		return 0;
	}
	case JSON_STRING: py_json_str(b, strview_json(v)); return 0;
	case JSON_INTEGER:
		snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
		strbuf_puts(b, num);
		return 0;
	case JSON_REAL: py_float(b, json_real_value(v), 1); return 0;
	case JSON_TRUE: strbuf_puts(b, "true"); return 0;
	case JSON_FALSE: strbuf_puts(b, "false"); return 0;
	default: strbuf_puts(b, "null"); return 0;
	}
}

/* Python str(x) of a JSON value (Jinja's `| string`); containers never reach here. */
void pv_py_str(struct strbuf* b, const json_t* v)
{
	char num[32];
	switch (json_typeof(v)) {
	case JSON_STRING: strbuf_putv(b, strview_json(v)); break;
	case JSON_INTEGER:
		snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
		strbuf_puts(b, num);
		break;
	case JSON_REAL: py_float(b, json_real_value(v), 0); break;
	case JSON_TRUE: strbuf_puts(b, "True"); break;
	case JSON_FALSE: strbuf_puts(b, "False"); break;
	case JSON_NULL: strbuf_puts(b, "None"); break;
	default: pv_py_json(b, v, 0); break;
	}
}

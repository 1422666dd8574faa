/* utf8.c: see utf8.h. */
#include "base/utf8.h"

int pv_utf8_seq(const char* str, size_t n, int* bad)
{
	const uint8_t* s = (const uint8_t*)str;
	uint8_t c = s[0], lo = 0x80, hi = 0xBF;
	int need;

	if (c < 0x80) return 1;
	if (c >= 0xC2 && c <= 0xDF) need = 1;
	else if (c == 0xE0) { need = 2; lo = 0xA0; }
	else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 2;
	else if (c == 0xED) { need = 2; hi = 0x9F; }
	else if (c == 0xF0) { need = 3; lo = 0x90; }
	else if (c >= 0xF1 && c <= 0xF3) need = 3;
	else if (c == 0xF4) { need = 3; hi = 0x8F; }
	else {
		*bad = 1;
		return 0;
	}
	for (int k = 1; k <= need; k++) {
		if ((size_t)k >= n) return -1;
		uint8_t b = s[k];
		if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) {
			*bad = k;
			return 0;
		}
	}
	return need + 1;
}

size_t pv_utf8_valid_prefix(const char* s, size_t n)
{
	size_t i = 0;
	int bad;

	while (i < n) {
		if ((uint8_t)s[i] < 0x80) {
			i++;
			continue;
		}
		int k = pv_utf8_seq(s + i, n - i, &bad);
		if (k <= 0) return i;
		i += (size_t)k;
	}
	return n;
}

int pv_utf8_put(char* o, uint32_t cp)
{
	if (cp < 0x80) { o[0] = (char)cp; return 1; }
	if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
	if (cp < 0x10000) {
		o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63));
		return 3;
	}
	o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 63));
	o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
	return 4;
}

size_t pv_utf8_decode(const char* s, size_t n, uint32_t* cp)
{
	const unsigned char* p = (const unsigned char*)s;
	unsigned c = p[0];
	size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
	if (len > n) len = 1;
	if (len == 1) {
		*cp = c;
		return 1;
	}
	uint32_t v = c & (0x7f >> len);
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80) {
			*cp = c;
			return 1;
		}
		v = v << 6 | (p[i] & 0x3f);
	}
	*cp = v;
	return len;
}

size_t pv_utf8_last(const char* s, size_t n, uint32_t* cp)
{
	size_t st = n - 1;
	while (st > 0 && n - st < 4 && ((unsigned char)s[st] & 0xc0) == 0x80) st--;
	size_t l = pv_utf8_decode(s + st, n - st, cp);
	if (st + l != n) { /* not a whole character: the last byte alone */
		st = n - 1;
		*cp = (unsigned char)s[st];
	}
	return st;
}

size_t pv_utf8_incomplete(const char* s, size_t n)
{
	for (size_t k = 1; k <= 3 && k <= n; k++) {
		unsigned c = (unsigned char)s[n - k];
		if ((c & 0xc0) == 0x80) continue;
		size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
		return len > k ? k : 0;
	}
	return 0;
}

/* json_util.c: see json_util.h. */
#include "format/json_util.h"

#include <stdlib.h>

#include "base/file.h"
#include "base/util.h"
#include "format/safetensors.h" /* pv_printable */

json_t* pv_json_read_file(const char* path, size_t max, size_t flags, char* err, size_t errlen)
{
	size_t n;
	char* buf = pv_file_read(path, max, &n, err, errlen);
	if (!buf) return NULL;
	json_error_t je;
	json_t* j = json_loadb(buf, n, flags, &je);
	free(buf);
	if (!j) {
		char text[sizeof je.text];
		pv_errf(err, errlen, "%s: not valid JSON (line %d, column %d): %s", path, je.line, je.column,
		        pv_printable(text, sizeof text, je.text));
	}
	return j;
}

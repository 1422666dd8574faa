/*
 * wire.c: the checks on a proven_wire.h request (wire.h says what an accepted request satisfies).
 */
#include "wire.h"

#include "proven.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(struct pvw_req) == 88, "the wire format (fuzz/seeds/wire) changed: write the seeds again");

static int bad(char* err, size_t errlen, const char* msg)
{
	snprintf(err, errlen, "%s", msg);
	return PV_E_INVALID;
}

/* a row window [row0, n) that fits the area of max_rows rows */
static int rows_ok(int32_t row0, int32_t n, int max_rows) { return row0 >= 0 && row0 < n && n - row0 <= max_rows; }

/* the checks on a copy (q) of the message */
static int validate(const struct pvw_req* q, const struct srv_wire_limits* lim, char* err, size_t errlen)
{
	if (q->magic != PVW_MAGIC) return bad(err, errlen, "not a proven_wire.h request (bad magic)");
	if (q->op == PVW_HELLO) {
		if (lim->have_session) return bad(err, errlen, "hello twice");
		if (q->n_ctx < 0 || q->n_ctx > lim->max_context || q->max_rows < 0 || q->max_rows > SRV_WIRE_MAX_ROWS ||
		    q->n_snapshots < 0 || q->n_snapshots > SRV_WIRE_MAX_SNAPSHOTS)
			return bad(err, errlen, "hello: n_ctx (<= the model's context), max_rows (<= 4096) or n_snapshots (<= 64) out of range");
		return 0;
	}
	if (!lim->have_session) return bad(err, errlen, "the first request must be hello");
	switch (q->op) {
	case PVW_RUN:
	case PVW_SYNC:
		if (q->n < 1 || q->n > lim->n_ctx) return bad(err, errlen, "run: n out of range [1, n_ctx]");
		if (q->flags & ~(unsigned)(PV_EVAL_EXACT | PV_EVAL_SNAPSHOT)) return bad(err, errlen, "run: unknown flags");
		if (q->want & ~(unsigned)(PVW_WANT_LOGITS | PVW_WANT_ARGMAX | PVW_WANT_HIDDEN)) return bad(err, errlen, "run: unknown want bits");
		if (q->op == PVW_RUN && (((q->want & PVW_WANT_LOGITS) && !rows_ok(q->logits_row0, q->n, lim->max_rows)) ||
		                         ((q->want & PVW_WANT_ARGMAX) && !rows_ok(q->argmax_row0, q->n, lim->max_rows)) ||
		                         ((q->want & PVW_WANT_HIDDEN) && !rows_ok(q->hidden_row0, q->n, lim->max_rows))))
			return bad(err, errlen, "run: an output asks for more rows than max_rows, or a bad row0");
		return 0;
	case PVW_TRUNCATE:
	case PVW_ROLLBACK:
		if (q->n < 0 || q->n > lim->n_ctx) return bad(err, errlen, "truncate/rollback: n out of range [0, n_ctx]");
		return 0;
	case PVW_CHECKPOINT: return 0;
	case PVW_GENERATE:
		if (q->n < 1 || q->n >= lim->n_ctx || q->max_tokens < 1 || q->max_tokens > lim->n_ctx || (q->draft != 0 && q->draft != 1) ||
		    q->draft_max < 0)
			return bad(err, errlen, "generate: prompt length, max_tokens, draft or draft_max out of range");
		if (!isfinite(q->temperature) || q->temperature < 0 || !(q->top_p >= 0 && q->top_p <= 1) ||
		    !(q->min_p >= 0 && q->min_p <= 1) || q->top_k < 0)
			return bad(err, errlen, "generate: temperature, top_p, min_p or top_k out of range");
		return 0;
	case PVW_TOKENIZE:
		if (q->n < 0 || (uint64_t)q->n > lim->text_cap) return bad(err, errlen, "tokenize: text longer than the text area");
		if (q->parse_special != 0 && q->parse_special != 1) return bad(err, errlen, "tokenize: parse_special is 0 or 1");
		return 0;
	case PVW_DETOKENIZE:
		if (q->n < 0 || q->n > lim->n_ctx) return bad(err, errlen, "detokenize: n out of range [0, n_ctx]");
		return 0;
	default: return bad(err, errlen, "unknown operation");
	}
}

int srv_wire_check(const void* msg, size_t len, const struct srv_wire_limits* lim, struct pvw_req* q, char* err,
                   size_t errlen)
{
	if (len != sizeof *q) return bad(err, errlen, "not a proven_wire.h request (wrong size: another protocol version?)");
	struct pvw_req c;
	memcpy(&c, msg, sizeof c); /* one copy: what is checked is what is used */
	int rc = validate(&c, lim, err, errlen);
	if (!rc) *q = c;
	return rc;
}

/*
 * wire.h: the checks on a proven_wire.h request before the shared-memory server acts on it. A
 * request is bytes from another process: every count and row index is bounded here, in one pure
 * function with no socket and no session (fuzz/fuzz_wire.c feeds it arbitrary bytes), so that
 * shm.c only ever indexes the segment with numbers this function accepted.
 */
#ifndef PV_SERVER_WIRE_H
#define PV_SERVER_WIRE_H

#include "proven_wire.h"

#include <stddef.h>
#include <stdint.h>

#define SRV_WIRE_MAX_ROWS 4096 /* max_rows a hello may ask for                                */
#define SRV_WIRE_MAX_SNAPSHOTS 64

struct srv_wire_limits {
	int have_session;   /* a hello was answered: the numbers below are the session's        */
	int max_context;    /* the model's: the largest n_ctx a hello may ask for              */
	int n_ctx;          /* the session's context (the tokens and out areas hold n_ctx ids) */
	int max_rows;       /* rows of the logits, argmax and hidden areas                      */
	uint64_t text_cap;  /* bytes of the text area                                           */
};

/* Checks the len bytes of msg as one request for a connection in the state lim describes; on
 * success copies it to *q and returns 0, else returns PV_E_INVALID with a one-line message in
 * err. Accepted requests satisfy, besides magic and size:
 *   hello (no session yet): 0 <= n_ctx <= max_context, 0 <= max_rows <= SRV_WIRE_MAX_ROWS,
 *       0 <= n_snapshots <= SRV_WIRE_MAX_SNAPSHOTS (0: the defaults);
 *   run / sync: 1 <= n <= n_ctx, flags within PV_EVAL_*, want within PVW_WANT_*, and for each
 *       wanted output of a run 0 <= row0 < n and n - row0 <= max_rows (sync writes one row);
 *   truncate / rollback: 0 <= n <= n_ctx; checkpoint: nothing;
 *   generate: 1 <= n < n_ctx, 1 <= max_tokens <= n_ctx, draft 0 or 1, draft_max >= 0 (0:
 *       the default; the generator caps it), temperature finite and >= 0, top_p and min_p in [0, 1], top_k >= 0;
 *   tokenize: 0 <= n <= text_cap, parse_special 0 or 1; detokenize: 0 <= n <= n_ctx. */
int srv_wire_check(const void* msg, size_t len, const struct srv_wire_limits* lim, struct pvw_req* q, char* err,
                   size_t errlen);

#endif

/*
 * fuzz_wire.c: libFuzzer target for the checks on the shared-memory protocol's requests
 * (server/wire.c), the bytes another process sends to the socket. The first byte picks the
 * connection's state (a session or not, its n_ctx and max_rows), the rest is the message. An
 * accepted request must satisfy every bound wire.h promises (what shm.c indexes the segment
 * with); a refused one has a one-line message. A broken promise traps.
 *
 *   make fuzz && build-fuzz/fuzz_wire -max_total_time=120 fuzz/seeds/wire
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../server/wire.h"
#include "proven.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static void check(int cond)
{
	if (!cond) __builtin_trap();
}

static int rows_in(int32_t row0, int32_t n, int max_rows) { return row0 >= 0 && row0 < n && n - row0 <= max_rows; }

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	if (size < 1) return 0;
	static const int ctxs[] = { 1, 2, 64, 4096 }, rows[] = { 1, 8, 64, 4096 };
	struct srv_wire_limits lim = { data[0] & 1, 32768, ctxs[(data[0] >> 1) & 3], rows[(data[0] >> 3) & 3], (data[0] & 32) ? 16 : 4u << 20 };
	struct pvw_req q;
	char err[256];
	err[0] = 0;
	int st = srv_wire_check(data + 1, size - 1, &lim, &q, err, sizeof err);
	if (st) {
		check(st == PV_E_INVALID && err[0] && strlen(err) < sizeof err && !strchr(err, '\n'));
		return 0;
	}
	check(size - 1 == sizeof q && q.magic == PVW_MAGIC && !memcmp(&q, data + 1, sizeof q));
	if (q.op == PVW_HELLO) {
		check(!lim.have_session && q.n_ctx >= 0 && q.n_ctx <= lim.max_context && q.max_rows >= 0 &&
		      q.max_rows <= SRV_WIRE_MAX_ROWS && q.n_snapshots >= 0 && q.n_snapshots <= SRV_WIRE_MAX_SNAPSHOTS);
		return 0;
	}
	check(lim.have_session);
	switch (q.op) {
	case PVW_RUN:
	case PVW_SYNC:
		check(q.n >= 1 && q.n <= lim.n_ctx && !(q.flags & ~3u) && !(q.want & ~7u));
		if (q.op == PVW_RUN) {
			if (q.want & PVW_WANT_LOGITS) check(rows_in(q.logits_row0, q.n, lim.max_rows));
			if (q.want & PVW_WANT_ARGMAX) check(rows_in(q.argmax_row0, q.n, lim.max_rows));
			if (q.want & PVW_WANT_HIDDEN) check(rows_in(q.hidden_row0, q.n, lim.max_rows));
		}
		break;
	case PVW_TRUNCATE:
	case PVW_ROLLBACK: check(q.n >= 0 && q.n <= lim.n_ctx); break;
	case PVW_CHECKPOINT: break;
	case PVW_GENERATE:
		check(q.n >= 1 && q.n < lim.n_ctx && q.max_tokens >= 1 && q.max_tokens <= lim.n_ctx && (q.draft == 0 || q.draft == 1));
		check(q.draft_max >= 0 && q.top_k >= 0);
		check(isfinite(q.temperature) && q.temperature >= 0 && q.top_p >= 0 && q.top_p <= 1 && q.min_p >= 0 && q.min_p <= 1);
		break;
	case PVW_TOKENIZE: check(q.n >= 0 && (uint64_t)q.n <= lim.text_cap && (q.parse_special == 0 || q.parse_special == 1)); break;
	case PVW_DETOKENIZE: check(q.n >= 0 && q.n <= lim.n_ctx); break;
	default: check(0); /* an unknown op is never accepted */
	}
	return 0;
}

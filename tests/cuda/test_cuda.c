/*
 * test_cuda.c: the CUDA backend on a GPU (make test-cuda). Without a CUDA device it prints
 * "no CUDA device" and fails: it can never pass silently.
 *
 *   gemv:        every weight type's GEMV against the CPU's pv_matmul_rows (tolerance below) and
 *                bitwise batch invariance (each row of a 1..16-row call equals that row alone)
 *   conformance: each fixture the backend supports against transformers' logits (the same TOL_REL
 *                as test_conformance) and the CPU engine's (TOL_CPU), greedy ids identical
 *   exactness:   on the GPU, bitwise: 8 and 16 rows in one call == one call per row; rollback;
 *                the checkpoint ring; the graph path == direct launches; one graph launch and one
 *                host sync per decoded token
 *   quantized:   a fixture with its matrices quantized (Q8_0, Q4_0: every matrix whose width is
 *                a whole number of blocks, the embedding included) against the CPU on the same
 *                weights, greedy ids identical
 *                and Q4_1, Q5_0, Q5_1 (qwen3, qwen2), MoE experts quantized (qwen3_moe: the
 *                gathered GEMVs); GEMVs of Q4_1, Q5_0, Q5_1, Q5_K against the CPU
 *   refused:     a weight type without a CUDA kernel (an invalid type) fails with a clear message
 *   real:        the real Qwen2.5-Coder-0.5B Q4_K_M GGUF (Q5_0/Q8_0/Q4_K/Q6_K) on CUDA vs the CPU
 *                and transformers over tests/data/real's prompts; skipped when the file is absent
 *   prefill:     the prompt path (bf16 GEMMs, src/cuda/prefill.cu) on every fixture and on quantized
 *                ones: the last row vs the exact 16-row path (one chunk, chunks of 48 rows, calls
 *                of 64 rows), greedy decode after it, counters, every row of the reference
 *                prompts vs transformers, in the fast mode (bf16 GEMM inputs: TOL_PREFILL on
 *                dense fixtures, a gross-error bound on hybrids) and the precise mode (bf16 hi +
 *                lo inputs: TOL_PRECISE everywhere; tolerances below); the other sections run
 *                their sessions with the prefill off (they check the exact path)
 *   prefill-bench (only when named): PV_PREFILL_MODEL's pp512 / pp4096 through the prefill path
 *                and pp512 through the 16-row path, tok/s (wall clock and CUDA events)
 * Every fixture runs: dense, Gated DeltaNet hybrids (recurrent form; rollback restores the state
 * from device-side checkpoints) and MoE (routing on the GPU, gathered expert GEMVs).
 *
 * Tolerances. CUDA and CPU compute the same float32 operations on the same weights in another
 * summation order (and CUDA's expf differs from glibc's by an ulp or two), so results differ by
 * rounding only: for a GEMV output, |gpu - cpu| <= TOL_DOT * sum_i |w_i x_i| (float32 reordering
 * error is at most ~n eps of that sum, typically sqrt(n) eps); for logits, the largest
 * |cuda - cpu| over a row divided by max(1, max |cpu logit|) must stay under TOL_CPU.
 */
#include "engine/backend.h"
#include "cuda/backend.h"
#include "fixture.h"
#include "harness.h"
#include "model/model.h"
#include "cpu/ops.h"
#include "cpu/kern.h"
#include "cpu/qdot.h"
#include "proven.h"
#include "quant/quant.h"

#include <math.h>
#include <time.h>
#include <sys/stat.h>

/* The CPU reference in its exact numerics (f32 activations): the CUDA kernels compute f32
 * activations too, and TOL_CPU is that comparison's bound (the fast numerics' cost is measured
 * on real text, docs/results/cpu-quality-*). */
static const struct pv_model_params cpu_exact = { .knobs = "cpu.exact_activations=1" };

#define TOL_REL 2e-4 /* against transformers, as test_conformance                        */
#define TOL_CPU 1e-4 /* against the CPU engine (summation order only; calibrate on a GPU)  */
#define TOL_DOT 1e-4 /* GEMV, relative to sum |w x|                                       */

static double g_worst_dot, g_worst_cpu, g_worst_ref;

/* ------------------------------------------------------------------------------ gemv --- */

/* every case that draws starts from the same state: the same numbers run alone or not */
#define RNG_SEED 0x12345678u
static uint32_t g_rng = RNG_SEED;
static float frand(void)
{
	g_rng = g_rng * 1664525u + 1013904223u;
	return ((g_rng >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

static uint16_t to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

/* A random [rows, cols] matrix of type t (raw bytes, malloc'd). */
static void* make_matrix(enum pv_dtype t, int rows, int cols)
{
	size_t rb = pv_dtype_row_bytes(t, cols);
	unsigned char* w = malloc(rb * (size_t)rows);
	float* f = malloc(sizeof(float) * (size_t)cols);
	for (int r = 0; r < rows; r++) {
		float scale = 0.05f * (1 + r % 7);
		for (int c = 0; c < cols; c++) f[c] = frand() * scale;
		unsigned char* dst = w + rb * (size_t)r;
		if (t == PV_F32) memcpy(dst, f, rb);
		else if (t == PV_BF16)
			for (int c = 0; c < cols; c++) {
				uint16_t h = to_bf16(f[c]);
				memcpy(dst + 2 * c, &h, 2);
			}
		else if (t == PV_F16)
			for (int c = 0; c < cols; c++) {
				uint16_t h = pv_f32_to_f16(f[c]);
				memcpy(dst + 2 * c, &h, 2);
			}
		else if (pv_quant_row(t, f, dst, cols)) {
			free(f);
			free(w);
			return NULL;
		}
	}
	free(f);
	return w;
}

static void gemv_case(enum pv_dtype t, int rows, int cols)
{
	char err[512];
	void* w = make_matrix(t, rows, cols);
	CHECK(w != NULL, "%s: cannot make a [%d, %d] matrix", pv_dtype_name(t), rows, cols);
	if (!w) return;
	struct pv_tensor W = { w, t, rows, cols };
	const int T = 16;
	float* x = malloc(sizeof(float) * (size_t)T * cols);
	for (int i = 0; i < T * cols; i++) x[i] = frand();
	float* ycpu = malloc(sizeof(float) * (size_t)T * rows);
	float* y16 = malloc(sizeof(float) * (size_t)T * rows);
	float* y1 = malloc(sizeof(float) * (size_t)rows);
	float* yk = malloc(sizeof(float) * (size_t)T * rows);
	float* wf = malloc(sizeof(float) * (size_t)cols);
	pv_matmul_rows(NULL, ycpu, rows, x, cols, T, &W, 0, rows);

	int rc = pv_cuda_test_matmul(&W, x, T, y16, err, sizeof(err));
	CHECK(rc == 0, "%s [%d, %d]: %s", pv_dtype_name(t), rows, cols, err);
	if (rc) goto done;
	/* against the CPU, relative to sum |w x| */
	double worst = 0;
	for (int r = 0; r < rows; r++) {
		pv_tensor_row_f32(&W, r, wf);
		for (int k = 0; k < T; k++) {
			double mag = 0;
			for (int c = 0; c < cols; c++) mag += fabs((double)wf[c] * x[(size_t)k * cols + c]);
			double e = fabs((double)y16[(size_t)k * rows + r] - ycpu[(size_t)k * rows + r]) / (mag > 1e-30 ? mag : 1e-30);
			if (!(e <= worst)) worst = e;
		}
	}
	if (!(worst <= g_worst_dot)) g_worst_dot = worst;
	CHECK(worst <= TOL_DOT, "%s [%d, %d]: GPU vs CPU error %.3g of sum |w x| > %g", pv_dtype_name(t), rows, cols, worst, TOL_DOT);
	/* batch invariance: every row alone, and calls of 2, 3, 5, 8, 9 rows */
	int same = 1;
	for (int k = 0; k < T && same; k++) {
		rc = pv_cuda_test_matmul(&W, x + (size_t)k * cols, 1, y1, err, sizeof(err));
		same = rc == 0 && !memcmp(y1, y16 + (size_t)k * rows, sizeof(float) * rows);
	}
	CHECK(same, "%s [%d, %d]: a row computed alone differs from the same row in a 16-row call", pv_dtype_name(t), rows, cols);
	static const int Ts[] = { 2, 3, 5, 8, 9 };
	for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
		rc = pv_cuda_test_matmul(&W, x, Ts[i], yk, err, sizeof(err));
		CHECK(rc == 0 && !memcmp(yk, y16, sizeof(float) * (size_t)Ts[i] * rows), "%s [%d, %d]: a %d-row call differs from the 16-row call",
		      pv_dtype_name(t), rows, cols, Ts[i]);
	}
	/* 37 rows in one launch (16-row groups side by side, the MoE prompt's router): row k is row
	 * k % 16 of x, so its output must be that row's bits in the 16-row call */
	{
		enum { T37 = 37 };
		float* x37 = malloc(sizeof(float) * (size_t)T37 * cols);
		float* y37 = malloc(sizeof(float) * (size_t)T37 * rows);
		for (int k = 0; k < T37; k++) memcpy(x37 + (size_t)k * cols, x + (size_t)(k % T) * cols, sizeof(float) * cols);
		rc = pv_cuda_test_matmul(&W, x37, T37, y37, err, sizeof(err));
		int bad = rc != 0;
		for (int k = 0; k < T37 && !bad; k++)
			bad = memcmp(y37 + (size_t)k * rows, y16 + (size_t)(k % T) * rows, sizeof(float) * rows) != 0;
		CHECK(!bad, "%s [%d, %d]: a 37-row call (16-row groups in one launch) differs from the 16-row call: %s",
		      pv_dtype_name(t), rows, cols, rc ? err : "bits");
		free(x37);
		free(y37);
	}
	printf("  gemv %-5s [%5d, %5d]  max |gpu - cpu| / sum|wx| %.2e\n", pv_dtype_name(t), rows, cols, worst);
done:
	free(w);
	free(x);
	free(ycpu);
	free(y16);
	free(y1);
	free(yk);
	free(wf);
}

/* cuda.q8_act (qgemv.cu): the GPU's integer GEMVs against the CPU's fast numerics (qdot.c's
 * reference: pv_act_convert, then pv_qdot_ref per output), bit for bit, for one row alone and for
 * calls of 2-16 rows. mode 1 puts awkward blocks in the activations: all zeros, one huge value,
 * ties of the rounding (amax 127, so x * id = x, and halves), an infinity and a NaN (outputs then
 * compare as "both NaN": payloads may differ). */
static void qgemv_case(enum pv_dtype t, int rows, int cols, int mode)
{
	char err[512];
	void* w = make_matrix(t, rows, cols);
	CHECK(w != NULL, "%s: cannot make a [%d, %d] matrix", pv_dtype_name(t), rows, cols);
	if (!w) return;
	struct pv_tensor W = { w, t, rows, cols };
	enum { T = 16 };
	float* x = malloc(sizeof(float) * (size_t)T * cols);
	for (int i = 0; i < T * cols; i++) x[i] = frand();
	if (mode == 1) {
		for (int c = 0; c < 256 && c < cols; c++) x[c] = 0.0f;                        /* row 0: a zero block */
		x[(size_t)1 * cols + 5] = 3.0e30f;                                              /* row 1: one huge value */
		for (int c = 0; c < cols; c++) /* row 2: amax 127, so id = 1 and the halves are ties */
			x[(size_t)2 * cols + c] = c % 32 == 0 ? 127.0f : (float)((c % 255) - 127) * 0.5f;
		x[(size_t)3 * cols + cols / 2] = INFINITY;                                      /* row 3 */
		x[(size_t)4 * cols + 7] = NAN;                                                  /* row 4 */
		x[(size_t)5 * cols + 1] = -0.0f;
	}
	const int fmt = pv_act_fmt_of(t);
	const size_t rb = pv_act_row_bytes(fmt, cols);
	void* act = aligned_alloc(64, rb * T);
	float* yref = malloc(sizeof(float) * (size_t)T * rows);
	float* y16 = malloc(sizeof(float) * (size_t)T * rows);
	float* yk = malloc(sizeof(float) * (size_t)T * rows);
	pv_act_convert(fmt, x, cols, T, cols, act, rb);
	pv_qgemm_generic(t, yref, rows, act, rb, T, w, cols, 0, rows);
	setenv("PV_CUDA_Q8_ACT", "1", 1);
	int rc = pv_cuda_test_matmul(&W, x, T, y16, err, sizeof(err));
	CHECK(rc == 0, "q8 %s [%d, %d]: %s", pv_dtype_name(t), rows, cols, err);
	int bad = -1;
	for (int i = 0; rc == 0 && i < T * rows && bad < 0; i++) {
		const int nan = isnan(yref[i]) && isnan(y16[i]);
		if (!nan && memcmp(&yref[i], &y16[i], 4)) bad = i;
	}
	CHECK(rc == 0 && bad < 0, "q8 %s [%d, %d] mode %d: the GPU differs from the CPU's fast numerics at row %d output %d: %.9g vs %.9g",
	      pv_dtype_name(t), rows, cols, mode, bad < 0 ? 0 : bad / rows, bad < 0 ? 0 : bad % rows, bad < 0 ? 0.0 : (double)y16[bad],
	      bad < 0 ? 0.0 : (double)yref[bad]);
	/* every row alone, and calls of 2, 3, 5, 8, 9 rows: the same bits */
	static const int Ts[] = { 1, 2, 3, 5, 8, 9 };
	for (size_t i = 0; rc == 0 && i < sizeof Ts / sizeof Ts[0]; i++) {
		for (int k0 = 0; k0 + Ts[i] <= T; k0 += Ts[i]) {
			rc = pv_cuda_test_matmul(&W, x + (size_t)k0 * cols, Ts[i], yk, err, sizeof(err));
			int same = rc == 0;
			for (int j = 0; same && j < Ts[i] * rows; j++) {
				const float a = yk[j], b = y16[(size_t)k0 * rows + j];
				same = (isnan(a) && isnan(b)) || !memcmp(&a, &b, 4);
			}
			CHECK(same, "q8 %s [%d, %d]: a %d-row call at row %d differs from the 16-row call", pv_dtype_name(t), rows, cols,
			      Ts[i], k0);
			if (!same) break;
		}
	}
	unsetenv("PV_CUDA_Q8_ACT");
	printf("  q8 gemv %-5s [%5d, %5d] mode %d: %s\n", pv_dtype_name(t), rows, cols, mode, bad < 0 && rc == 0 ? "bitwise the CPU" : "DIFFERS");
	free(w);
	free(x);
	free(act);
	free(yref);
	free(y16);
	free(yk);
}

/* The add+RMSNorm (norm_rope.cu) by the cluster form (cuda.norm_cluster, the default) and by one
 * block per row: x += delta bitwise the host's float adds; xn within 4e-6 of a double reference
 * (of the largest |xn|); each row alone and calls of n rows the same bits (batch invariance);
 * the quantized form of xn (cuda.q8_act) bitwise the CPU's pv_act_convert of the GPU's own xn:
 * codes, scales and the 32-element sums. Widths: one chunk, partial chunks (896, 4100), up to
 * 8192 (32 chunks) and 12288 (the one-block fallback). */
static size_t a16(size_t n) { return (n + 15) & ~(size_t)15; }

static void norm_case(int H, int n, int blk, const char* spec)
{
	char err[512];
	const size_t N = (size_t)n * H;
	float *x = malloc(sizeof(float) * N), *x0 = malloc(sizeof(float) * N), *delta = malloc(sizeof(float) * N);
	float *w = malloc(sizeof(float) * H), *xn = malloc(sizeof(float) * N), *x1 = malloc(sizeof(float) * H);
	float* xn1 = malloc(sizeof(float) * H);
	const size_t rb = blk ? a16((size_t)H) + a16((size_t)(H / blk) * 4) + a16((size_t)(H / 32) * 4) : 0;
	unsigned char* q = blk ? malloc(rb * n) : NULL;
	unsigned char* q1 = blk ? malloc(rb) : NULL;
	for (size_t i = 0; i < N; i++) x0[i] = 3.0f * frand(), delta[i] = frand();
	for (int i = 0; i < H; i++) w[i] = 1.0f + 0.25f * frand();
	memcpy(x, x0, sizeof(float) * N);
	const float eps = 1e-6f;
	int rc = pv_cuda_test_norm(x, delta, w, H, n, eps, spec, xn, blk, q, err, sizeof err);
	CHECK(rc == 0, "norm H %d n %d blk %d %s: %s", H, n, blk, spec, err);
	double worst = 0;
	int add_ok = 1, alone_ok = 1, q_ok = 1;
	for (int t = 0; rc == 0 && t < n; t++) {
		const float* xr = x + (size_t)t * H;
		double ss = 0, amax = 0;
		for (int i = 0; i < H; i++) {
			const float v = x0[(size_t)t * H + i] + delta[(size_t)t * H + i];
			if (memcmp(&v, &xr[i], 4)) add_ok = 0;
			ss += (double)v * v;
		}
		const double r = 1.0 / sqrt(ss / H + eps);
		for (int i = 0; i < H; i++) amax = fmax(amax, fabs((double)xr[i] * r * w[i]));
		for (int i = 0; i < H; i++) {
			const double e = fabs(xn[(size_t)t * H + i] - (double)xr[i] * r * w[i]) / amax;
			if (!(e <= worst)) worst = e;
		}
		/* the row alone */
		memcpy(x1, x0 + (size_t)t * H, sizeof(float) * H);
		if (pv_cuda_test_norm(x1, delta + (size_t)t * H, w, H, 1, eps, spec, xn1, blk, q1, err, sizeof err) ||
		    memcmp(x1, xr, sizeof(float) * H) || memcmp(xn1, xn + (size_t)t * H, sizeof(float) * H) ||
		    (blk && memcmp(q1, q + rb * t, rb)))
			alone_ok = 0;
		if (blk) { /* the CPU's conversion of this xn */
			const int fmt = blk == 256 ? PV_ACT_Q8K : PV_ACT_Q8;
			const size_t crb = pv_act_row_bytes(fmt, H);
			void* act = aligned_alloc(64, (crb + 63) / 64 * 64);
			pv_act_convert(fmt, xn + (size_t)t * H, H, 1, H, act, crb);
			struct pv_qrow cr = pv_act_row(act, fmt, H);
			const unsigned char* g = q + rb * t;
			const float* gd = (const float*)(const void*)(g + a16((size_t)H));
			const int32_t* gs = (const int32_t*)(const void*)(g + a16((size_t)H) + a16((size_t)(H / blk) * 4));
			if (memcmp(g, cr.q, (size_t)H) || memcmp(gd, cr.d, sizeof(float) * (size_t)(H / blk))) q_ok = 0;
			for (int b = 0; b < H / 32 && q_ok; b++) {
				int sum = 0;
				for (int i = 0; i < 32; i++) sum += cr.q[32 * b + i];
				q_ok = gs[b] == sum;
			}
			free(act);
		}
	}
	CHECK(rc == 0 && add_ok, "norm H %d n %d %s: x + delta is not the host's float add", H, n, spec);
	CHECK(rc == 0 && worst <= 4e-6, "norm H %d n %d %s: xn off the double reference by %.3g of its largest", H, n, spec, worst);
	CHECK(rc == 0 && alone_ok, "norm H %d n %d blk %d %s: a row alone differs from the %d-row call", H, n, blk, spec, n);
	CHECK(rc == 0 && q_ok, "norm H %d n %d blk %d %s: the quantized form is not the CPU's conversion of xn", H, n, blk, spec);
	printf("  norm %-20s H %5d n %2d blk %3d: rel %.2e%s\n", spec[0] ? spec : "(defaults)", H, n, blk, worst,
	       add_ok && alone_ok && q_ok ? "" : " FAILED");
	free(x), free(x0), free(delta), free(w), free(xn), free(x1), free(xn1), free(q), free(q1);
}

static void test_norm(void)
{
	static const int Hs[] = { 64, 896, 1024, 2560, 4096, 4100, 5120, 8192, 12288 };
	static const char* const specs[] = { "", "cuda.norm_cluster=0", "cuda.norm_early=0" };
	for (size_t h = 0; h < sizeof Hs / sizeof Hs[0]; h++)
		for (int si = 0; si < 3; si++) {
			const int H = Hs[h];
			norm_case(H, 5, 0, specs[si]);
			if (H % 32 == 0) norm_case(H, 16, 32, specs[si]);
			if (H % 256 == 0) norm_case(H, 3, 256, specs[si]);
		}
}

static void test_qgemv(void)
{
	static const enum pv_dtype types[] = { PV_Q8_0, PV_Q4_K, PV_Q6_K };
	static const int rows[] = { 1, 37, 300 };
	static const int cols[] = { 256, 512, 2816, 4096 };
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		for (size_t ri = 0; ri < 3; ri++)
			for (size_t ci = 0; ci < 4; ci++) qgemv_case(types[ti], rows[ri], cols[ci], 0);
		qgemv_case(types[ti], 64, 2816, 1);
		qgemv_case(types[ti], 1024, 12288, 0);
	}
	qgemv_case(PV_Q8_0, 33, 896, 0); /* not a whole number of 256-element chunks */
	qgemv_case(PV_Q8_0, 33, 96, 1);
	/* the default is cuda.q8_rows=4 and cuda.q8_early=1 (two Q4_K or Q6_K rows a pass, the first
	 * passes before the PDL wait); the other forms give the same bits: 2 (two Q4_K rows, every
	 * pass in flight), 3 (Q4_K only), 1 (a row a warp), each with the early loads off, on (1) and
	 * on for calls of 2-16 rows too (2) */
	static const char* const forms[] = { "2", "3", "1" };
	static const char* const earlies[] = { "0", "1", "2" };
	for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++)
		for (int e = 0; e < 3; e++) {
			setenv("PV_CUDA_Q8_ROWS", forms[f], 1);
			setenv("PV_CUDA_Q8_EARLY", earlies[e], 1);
			for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
				if (f < 2 && types[ti] != PV_Q4_K) continue;
				qgemv_case(types[ti], 37, 4096, 0);
				qgemv_case(types[ti], 64, 2816, 1);
				if (e) qgemv_case(types[ti], 1024, 12288, 0);
			}
		}
	setenv("PV_CUDA_Q8_ROWS", "4", 1);
	setenv("PV_CUDA_Q8_EARLY", "0", 1);
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) qgemv_case(types[ti], 300, 4096, 0);
	unsetenv("PV_CUDA_Q8_ROWS");
	unsetenv("PV_CUDA_Q8_EARLY");
}

static void test_gemv_quick(void)
{
	static const enum pv_dtype types[] = { PV_BF16, PV_F16, PV_F32, PV_Q8_0, PV_Q4_0, PV_Q4_1, PV_Q5_0, PV_Q5_1, PV_Q4_K, PV_Q5_K, PV_Q6_K };
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) gemv_case(types[ti], 37, 512);
	gemv_case(PV_BF16, 5, 203);
}

static void test_gemv(void)
{
	static const enum pv_dtype types[] = { PV_BF16, PV_F16, PV_F32, PV_Q8_0, PV_Q4_0, PV_Q4_1, PV_Q5_0, PV_Q5_1, PV_Q4_K, PV_Q5_K, PV_Q6_K };
	static const int rows[] = { 1, 37, 300 };
	static const int cols_k[] = { 256, 512, 2816 };
	static const int cols_odd[] = { 24, 80, 203 };
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		enum pv_dtype t = types[ti];
		for (size_t ri = 0; ri < 3; ri++) {
			for (size_t ci = 0; ci < 3; ci++) gemv_case(t, rows[ri], cols_k[ci]);
			if (!pv_dtype_is_quant(t))
				for (size_t ci = 0; ci < 3; ci++) gemv_case(t, rows[ri], cols_odd[ci]);
		}
	}
	gemv_case(PV_BF16, 4096, 4096);
	/* the bulk-copy one-row kernel (gemv_tma.cu): rows of many stages through its 4-stage ring,
	 * and a last stage shorter than the others */
	gemv_case(PV_BF16, 1000, 12288);
	gemv_case(PV_F16, 77, 5128);
	gemv_case(PV_F32, 77, 2572);
	gemv_case(PV_Q4_K, 1024, 12288);
	/* the real 0.5B model's shapes (H 896, FFN 4864) and a wide Q5_K */
	gemv_case(PV_Q5_0, 896, 896);
	gemv_case(PV_Q5_0, 4864, 896);
	gemv_case(PV_Q5_K, 1024, 12288);
	gemv_case(PV_Q4_1, 300, 4864);
	gemv_case(PV_Q5_1, 300, 4864);
	/* cuda.gemv_early=0 (the default is 1: one-row calls request their first batch of weight units
	 * before the PDL wait): every row alone must still give the 16-row call's bits */
	setenv("PV_CUDA_GEMV_EARLY", "0", 1);
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		gemv_case(types[ti], 37, 2816);
		gemv_case(types[ti], 5, 256);
		if (!pv_dtype_is_quant(types[ti])) gemv_case(types[ti], 37, 203);
	}
	gemv_case(PV_BF16, 4096, 4096);
	gemv_case(PV_Q8_0, 1000, 12288);
	unsetenv("PV_CUDA_GEMV_EARLY");
}

/* ------------------------------------------------------------------------ fixtures --- */

static double row_err(const float* a, const float* ref, int V, double* refmax)
{
	double e = 0, mx = 0;
	for (int i = 0; i < V; i++) {
		double d = fabs((double)a[i] - ref[i]);
		if (!(d <= e)) e = d;
		if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
	}
	*refmax = mx;
	return e;
}

/* max over rows of (max |a - ref|) / max(1, max |ref|) */
static double rel_err(const float* a, const float* ref, int n, int V)
{
	double worst = 0;
	for (int t = 0; t < n; t++) {
		double mx, e = row_err(a + (size_t)t * V, ref + (size_t)t * V, V, &mx);
		double rel = e / (mx > 1 ? mx : 1);
		if (!(rel <= worst)) worst = rel;
	}
	return worst;
}

static pv_session* new_session(pv_model* m, int ctx, int ckpts)
{
	char err[256];
	pv_session* s = NULL;
	struct pv_session_params p = { .n_ctx = ctx, .n_checkpoints = ckpts };
	if (pv_session_new(&s, m, &p, err, sizeof(err))) fprintf(stderr, "session: %s\n", err);
	pv_cuda_set_prefill(s, 0, 0); /* these sections check the exact 16-row path; section prefill the other */
	return s;
}

static int eval_ok(pv_session* s, const int32_t* t, int n, float* lg, int mode)
{
	if (pv_session_eval(s, t, n, lg, mode)) {
		fprintf(stderr, "eval: %s\n", pv_session_error(s));
		return 0;
	}
	const char* e = pv_cuda_session_error(s);
	if (e && strcmp(e, "not a CUDA session")) {
		fprintf(stderr, "cuda: %s\n", e);
		return 0;
	}
	return 1;
}

/* One case of the fixture (prompt, greedy, [append, greedy]) on the CUDA session gs and on the
 * CPU session cs, teacher-forced with the reference ids. */
static void conformance_case(const char* name, json_t* c, const char* refpath, pv_session* gs, pv_session* cs, int V)
{
	const char* cname = json_string_value(json_object_get(c, "name"));
	char tname[64];
	snprintf(tname, sizeof(tname), "logits_%s", cname);
	int R = 0, C = 0;
	float* lref = fx_read_f32(refpath, tname, &R, &C);
	CHECK(lref && C == V, "%s/%s: reference logits missing", name, cname);
	if (!lref || C != V) {
		free(lref);
		return;
	}
	int multi = !strcmp(cname, "multiturn");
	int np, n1, na = 0, n2 = 0;
	int32_t* prompt = fx_ids(json_object_get(c, "prompt"), &np);
	int32_t* g1 = fx_ids(json_object_get(c, multi ? "generated1" : "generated"), &n1);
	int32_t* app = multi ? fx_ids(json_object_get(c, "append"), &na) : NULL;
	int32_t* g2 = multi ? fx_ids(json_object_get(c, "generated2"), &n2) : NULL;
	int maxn = np > na ? np : na;
	float* lg = malloc(sizeof(float) * (size_t)V * maxn);
	float* lc = malloc(sizeof(float) * (size_t)V * maxn);
	double e_ref = 0, e_cpu = 0;
	int ids_ok = 1, ok = 1;
	int row = 0;
	for (int phase = 0; phase < (multi ? 2 : 1) && ok; phase++) {
		const int32_t* in = phase ? app : prompt;
		int nin = phase ? na : np;
		const int32_t* gen = phase ? g2 : g1;
		int ngen = phase ? n2 : n1;
		ok = eval_ok(gs, in, nin, lg, PV_LOGITS_ALL) && eval_ok(cs, in, nin, lc, PV_LOGITS_ALL);
		if (!ok) break;
		double e = rel_err(lg, lref + (size_t)row * V, nin, V);
		e_ref = e > e_ref ? e : e_ref;
		e = rel_err(lg, lc, nin, V);
		e_cpu = e > e_cpu ? e : e_cpu;
		row += nin;
		for (int i = 0; i < ngen && ok; i++) {
			/* the previous row: the call's last row, then each one-row call's */
			int tok = pv_argmax(lg + (size_t)(i ? 0 : nin - 1) * V, V);
			ids_ok &= tok == gen[i];
			int32_t feed = gen[i]; /* teacher-forced, so the rows stay comparable after a miss */
			ok = eval_ok(gs, &feed, 1, lg, PV_LOGITS_LAST) && eval_ok(cs, &feed, 1, lc, PV_LOGITS_LAST);
			if (!ok) break;
			ids_ok &= pv_cuda_last_token(gs) == pv_argmax(lg, V);
			e = rel_err(lg, lref + (size_t)row * V, 1, V);
			e_ref = e > e_ref ? e : e_ref;
			e = rel_err(lg, lc, 1, V);
			e_cpu = e > e_cpu ? e : e_cpu;
			row++;
		}
	}
	CHECK(ok, "%s/%s: evaluation failed", name, cname);
	CHECK(ids_ok, "%s/%s: greedy ids differ from transformers' (or the GPU argmax from the logits')", name, cname);
	CHECK(e_ref <= TOL_REL, "%s/%s: CUDA vs transformers rel error %.3g > %g", name, cname, e_ref, TOL_REL);
	CHECK(e_cpu <= TOL_CPU, "%s/%s: CUDA vs CPU rel error %.3g > %g", name, cname, e_cpu, TOL_CPU);
	if (e_ref > g_worst_ref) g_worst_ref = e_ref;
	if (e_cpu > g_worst_cpu) g_worst_cpu = e_cpu;
	printf("  %-16s %-9s vs transformers rel %.3e   vs CPU rel %.3e\n", name, cname, e_ref, e_cpu);
	free(prompt); free(g1); free(app); free(g2); free(lref); free(lg); free(lc);
}

/* Batch invariance, rollback, the checkpoint ring, graph vs direct, counters: bitwise. */
static void exactness(const char* name, pv_model* m, const int32_t* prompt, int np, int V)
{
	int32_t d[16];
	for (int i = 0; i < 16; i++) d[i] = prompt[(i * 7 + 3) % np];
	float* a = malloc(sizeof(float) * V * 16);
	float* b = malloc(sizeof(float) * V * 16);

	for (int D = 8; D <= 16; D += 8) {
		pv_session* s1 = new_session(m, np + 40, 4);
		pv_session* s2 = new_session(m, np + 40, 4);
		if (!s1 || !s2) {
			CHECK(0, "%s: sessions", name);
			pv_session_free(s1);
			pv_session_free(s2);
			continue;
		}
		int ok = eval_ok(s1, prompt, np, NULL, PV_LOGITS_ALL) && eval_ok(s2, prompt, np, NULL, PV_LOGITS_ALL) &&
		         eval_ok(s1, d, D, a, PV_LOGITS_ALL);
		for (int i = 0; i < D && ok; i++) ok = eval_ok(s2, &d[i], 1, b + (size_t)i * V, PV_LOGITS_LAST);
		CHECK(ok && !memcmp(a, b, sizeof(float) * V * D), "%s: a %d-row call differs from %d one-row calls (GPU)", name, D, D);
		pv_session_free(s1);
		pv_session_free(s2);
	}

	/* rollback: as test_conformance's exactness() */
	pv_session* s1 = new_session(m, np + 32, 4);
	pv_session* s2 = new_session(m, np + 32, 4);
	pv_session* s3 = new_session(m, np + 32, 4);
	if (s1 && s2 && s3) {
		eval_ok(s1, prompt, np, NULL, PV_LOGITS_ALL);
		eval_ok(s2, prompt, np, NULL, PV_LOGITS_ALL);
		eval_ok(s1, d, 8, a, PV_LOGITS_ALL);
		eval_ok(s2, d, 8, b, PV_LOGITS_ALL);
		pv_session_checkpoint(s1);
		eval_ok(s1, d, 8, a, PV_LOGITS_ALL);
		CHECK(pv_session_rollback(s1, np + 8 + 3) == 0, "%s: rollback: %s", name, pv_session_error(s1));
		eval_ok(s2, d, 3, NULL, PV_LOGITS_ALL);
		int t1 = d[5], t2 = d[5], same = 1;
		for (int i = 0; i < 6; i++) {
			same &= eval_ok(s1, &t1, 1, a, PV_LOGITS_LAST) && eval_ok(s2, &t2, 1, b, PV_LOGITS_LAST);
			same &= !memcmp(a, b, sizeof(float) * V);
			t1 = pv_argmax(a, V);
			t2 = pv_argmax(b, V);
		}
		CHECK(same, "%s: decoding after rollback differs from a session that never saw the rolled-back rows (GPU)", name);
		CHECK(pv_session_rollback(s1, 5) == 0, "%s: rollback to 5: %s", name, pv_session_error(s1));
		eval_ok(s3, prompt, 5, NULL, PV_LOGITS_ALL);
		same = eval_ok(s1, &d[0], 1, a, PV_LOGITS_LAST) && eval_ok(s3, &d[0], 1, b, PV_LOGITS_LAST);
		CHECK(same && !memcmp(a, b, sizeof(float) * V), "%s: rollback to length 5 then decode differs (GPU)", name);
	} else {
		CHECK(0, "%s: sessions", name);
	}
	pv_session_free(s1);
	pv_session_free(s2);
	pv_session_free(s3);

	/* the checkpoint ring (2 slots, 3 checkpoints) */
	{
		pv_session* r = new_session(m, np + 32, 2);
		pv_session* f = new_session(m, np + 32, 2);
		if (r && f) {
			for (int k = 0; k < 3; k++) {
				eval_ok(r, &d[k], 1, NULL, PV_LOGITS_LAST);
				pv_session_checkpoint(r);
			}
			eval_ok(r, d, 4, NULL, PV_LOGITS_ALL);
			CHECK(pv_session_rollback(r, 3) == 0, "%s: ring rollback: %s", name, pv_session_error(r));
			eval_ok(f, d, 3, NULL, PV_LOGITS_ALL);
			int same = eval_ok(r, &d[7], 1, a, PV_LOGITS_LAST) && eval_ok(f, &d[7], 1, b, PV_LOGITS_LAST);
			CHECK(same && !memcmp(a, b, sizeof(float) * V), "%s: rollback through the checkpoint ring differs (GPU)", name);
		}
		pv_session_free(r);
		pv_session_free(f);
	}

	/* the graph vs direct launches, and the per-token counters */
	{
		pv_session* g = new_session(m, np + 32, 4);
		pv_session* n = new_session(m, np + 32, 4);
		if (g && n) {
			pv_cuda_set_graphs(n, 0);
			int ok = eval_ok(g, prompt, np, a, PV_LOGITS_LAST) && eval_ok(n, prompt, np, b, PV_LOGITS_LAST);
			struct pv_cuda_session_stats s0, s1st;
			pv_cuda_session_stats(g, &s0);
			int tok = pv_argmax(a, V), same = ok;
			const int steps = 12;
			for (int i = 0; i < steps && ok; i++) {
				ok = eval_ok(g, &tok, 1, a, PV_LOGITS_LAST) && eval_ok(n, &tok, 1, b, PV_LOGITS_LAST);
				same &= ok && !memcmp(a, b, sizeof(float) * V);
				same &= pv_cuda_last_token(g) == pv_cuda_last_token(n) && pv_cuda_last_token(g) == pv_argmax(a, V);
				tok = pv_argmax(a, V);
			}
			/* greedy without host logits: only the id comes back */
			for (int i = 0; i < 4 && ok; i++) {
				ok = eval_ok(g, &tok, 1, NULL, PV_LOGITS_LAST) && eval_ok(n, &tok, 1, b, PV_LOGITS_LAST);
				same &= ok && pv_cuda_last_token(g) == pv_argmax(b, V);
				tok = pv_argmax(b, V);
			}
			pv_cuda_session_stats(g, &s1st);
			CHECK(same, "%s: graph replay differs from direct launches", name);
			double steps_all = steps + 4;
			const char* ge = getenv("PV_CUDA_GRAPHS");
			const int graphs = !(ge && !strcmp(ge, "0")); /* PV_CUDA_GRAPHS=0: a diagnosis run without graphs */
			CHECK(!graphs ||
			          (s1st.graph_launches - s0.graph_launches == (uint64_t)steps_all && s1st.syncs - s0.syncs == (uint64_t)steps_all &&
			           s1st.graph_captures == 1 && s1st.graph_kernels > 0),
			      "%s: per token %.2f graph launches, %.2f syncs, %llu captures (want 1, 1, 1)", name,
			      (s1st.graph_launches - s0.graph_launches) / steps_all, (s1st.syncs - s0.syncs) / steps_all,
			      (unsigned long long)s1st.graph_captures);
			printf("  %-16s graph: %llu kernels, %.2f launches and %.2f syncs per token\n", name,
			       (unsigned long long)s1st.graph_kernels, (s1st.graph_launches - s0.graph_launches) / steps_all,
			       (s1st.syncs - s0.syncs) / steps_all);
		} else {
			CHECK(0, "%s: sessions", name);
		}
		pv_session_free(g);
		pv_session_free(n);
	}
	free(a);
	free(b);
}

static void fixture(const char* name)
{
	char dir[600], path[700], err[512];
	snprintf(dir, sizeof(dir), "%s/%s", fx_root(), name);
	snprintf(path, sizeof(path), "%s/reference.json", dir);
	json_t* ref = json_load_file(path, 0, NULL);
	CHECK(ref != NULL, "%s: no reference.json", name);
	if (!ref) return;
	pv_model *gm = NULL, *cm = NULL;
	struct pv_model_params gp = { .backend = "cuda" };
	int rc = pv_model_open(&gm, dir, &gp, err, sizeof(err));
	CHECK(rc == 0, "%s: open on cuda: %s", name, err);
	if (rc || pv_model_open(&cm, dir, &cpu_exact, err, sizeof(err))) {
		pv_model_close(gm);
		json_decref(ref);
		return;
	}
	const struct pv_model_info* in = pv_model_get_info(gm);
	int V = in->vocab, T = 0;
	json_t* cases = json_object_get(ref, "cases");
	for (size_t i = 0; i < json_array_size(cases); i++) {
		json_t* c = json_array_get(cases, i);
		const char* ks[] = { "prompt", "generated", "generated1", "append", "generated2" };
		int t = 0;
		for (int k = 0; k < 5; k++) t += (int)json_array_size(json_object_get(c, ks[k]));
		T = t > T ? t : T;
	}
	pv_session* gs = NULL;
	struct pv_session_params sp = { .n_ctx = T + 8 };
	rc = pv_session_new(&gs, gm, &sp, err, sizeof(err));
	CHECK(rc == 0, "%s: session: %s", name, err);
	pv_session_free(gs);
	if (!rc) {
		snprintf(path, sizeof(path), "%s/reference.safetensors", dir);
		for (size_t i = 0; i < json_array_size(cases); i++) {
			pv_session* g = new_session(gm, T + 8, 4);
			pv_session* c = new_session(cm, T + 8, 4);
			if (g && c) conformance_case(name, json_array_get(cases, i), path, g, c, V);
			else CHECK(0, "%s: sessions", name);
			pv_session_free(g);
			pv_session_free(c);
		}
		int np;
		int32_t* prompt = fx_ids(json_object_get(json_array_get(cases, 0), "prompt"), &np);
		exactness(name, gm, prompt, np, V);
		free(prompt);
	}
	pv_model_close(gm);
	pv_model_close(cm);
	json_decref(ref);
}

/* ----------------------------------------------------------------------- quantized --- */

/* Replaces every matrix of m whose width is a whole number of t's blocks by a quantized copy
 * (kept in *bufs for freeing). Returns how many were replaced. */
static int quantize_model(struct pv_model* m, enum pv_dtype t, void** bufs, int max)
{
	int n = 0;
	struct pv_tensor* mats[64];
	int nm = 0;
	mats[nm++] = &m->w.embed;
	int tied = m->w.lm_head.data == m->w.embed.data;
	if (!tied) mats[nm++] = &m->w.lm_head;
	for (int l = 0; l < m->cfg.n_layers && nm + 7 <= 64; l++) {
		struct pv_layer* L = &m->w.layers[l];
		struct pv_tensor* ls[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up, &L->ffn_down };
		for (int k = 0; k < 7; k++) mats[nm++] = ls[k];
	}
	float* row = malloc(sizeof(float) * 65536);
	for (int i = 0; i < nm && n < max; i++) {
		struct pv_tensor* W = mats[i];
		if (!W->data || W->cols % pv_dtype_block(t) || W->cols > 65536) continue;
		size_t rb = pv_dtype_row_bytes(t, W->cols);
		unsigned char* q = malloc(rb * (size_t)W->rows);
		int ok = 1;
		for (int64_t r = 0; r < W->rows && ok; r++) {
			pv_tensor_row_f32(W, r, row);
			ok = pv_quant_row(t, row, q + rb * (size_t)r, W->cols) == 0;
		}
		if (!ok) {
			free(q);
			continue;
		}
		W->data = q;
		W->type = t;
		bufs[n++] = q;
	}
	/* MoE experts (the gathered GEMVs): a field (gate, up, down) of every expert of a layer, or none */
	for (int l = 0; l < m->cfg.n_layers; l++) {
		struct pv_layer* L = &m->w.layers[l];
		if (!m->cfg.layer_moe || !m->cfg.layer_moe[l] || !L->experts) continue;
		for (int which = 0; which < 3; which++) {
			int E = m->cfg.n_experts, fits = E > 0;
			for (int e = 0; e < E && fits; e++) {
				const struct pv_tensor* W = which == 0 ? &L->experts[e].gate : which == 1 ? &L->experts[e].up : &L->experts[e].down;
				fits = W->data && W->cols % pv_dtype_block(t) == 0 && W->cols <= 65536;
			}
			if (!fits || n + E > max) continue;
			for (int e = 0; e < E; e++) {
				struct pv_tensor* W = which == 0 ? &L->experts[e].gate : which == 1 ? &L->experts[e].up : &L->experts[e].down;
				size_t rb = pv_dtype_row_bytes(t, W->cols);
				unsigned char* q = malloc(rb * (size_t)W->rows);
				for (int64_t r = 0; r < W->rows; r++) {
					pv_tensor_row_f32(W, r, row);
					CHECK(pv_quant_row(t, row, q + rb * (size_t)r, W->cols) == 0, "quantize expert %d", e);
				}
				W->data = q;
				W->type = t;
				bufs[n++] = q;
			}
		}
	}
	if (tied) m->w.lm_head = m->w.embed;
	free(row);
	return n;
}

static void quantized(const char* name, enum pv_dtype t)
{
	char dir[600], path[700], err[512];
	snprintf(dir, sizeof(dir), "%s/%s", fx_root(), name);
	snprintf(path, sizeof(path), "%s/reference.json", dir);
	json_t* ref = json_load_file(path, 0, NULL);
	pv_model* m = NULL;
	if (!ref || pv_model_open(&m, dir, NULL, err, sizeof(err))) {
		CHECK(0, "%s: cannot open", name);
		json_decref(ref);
		return;
	}
	void* bufs[256];
	int nq = quantize_model(m, t, bufs, 256);
	CHECK(nq > 0, "%s: no matrix could be quantized to %s", name, pv_dtype_name(t));
	m->backend->model_free(m); /* the CPU's repacked weights would be stale after quantize_model */
	int rc = pv_cuda_model_init(m, 0, err, sizeof(err));
	CHECK(rc == 0, "%s/%s: upload: %s", name, pv_dtype_name(t), err);
	if (!rc) {
		int V = m->cfg.vocab, np;
		int32_t* prompt = fx_ids(json_object_get(json_array_get(json_object_get(ref, "cases"), 0), "prompt"), &np);
		pv_session* g = new_session(m, np + 40, 4);
		/* f32 activations, the CPU's exact numerics (the K types' default, cuda.q8_act=2, is the
		 * CPU's fast numerics: qgemv here, test_cuda_api's q8 check) */
		CHECK(g && pv_cuda_set_knobs(g, "cuda.q8_act=0", err, sizeof err) == PV_OK, "%s/%s: knobs: %s", name,
		      pv_dtype_name(t), err);
		const struct pv_backend* cuda = m->backend;
		m->backend = pv_backend_find("cpu"); /* the same weights on the CPU */
		pv_session* c = new_session(m, np + 40, 4);
		m->backend = cuda;
		float* lg = malloc(sizeof(float) * (size_t)V * np);
		float* lc = malloc(sizeof(float) * (size_t)V * np);
		int ok = g && c && eval_ok(g, prompt, np, lg, PV_LOGITS_ALL) && eval_ok(c, prompt, np, lc, PV_LOGITS_ALL);
		double e = ok ? rel_err(lg, lc, np, V) : 1;
		int tg = pv_argmax(lg + (size_t)(np - 1) * V, V), tc = pv_argmax(lc + (size_t)(np - 1) * V, V), same = tg == tc;
		for (int i = 0; i < 16 && ok; i++) {
			ok = eval_ok(g, &tg, 1, lg, PV_LOGITS_LAST) && eval_ok(c, &tc, 1, lc, PV_LOGITS_LAST);
			double ei = rel_err(lg, lc, 1, V);
			e = ei > e ? ei : e;
			tg = pv_argmax(lg, V);
			tc = pv_argmax(lc, V);
			same &= tg == tc;
		}
		CHECK(ok, "%s/%s: evaluation failed", name, pv_dtype_name(t));
		CHECK(same, "%s/%s: greedy ids differ between CUDA and CPU", name, pv_dtype_name(t));
		CHECK(e <= TOL_CPU, "%s/%s: CUDA vs CPU rel error %.3g > %g", name, pv_dtype_name(t), e, TOL_CPU);
		if (e > g_worst_cpu) g_worst_cpu = e;
		printf("  %-16s %-5s (%d matrices quantized) vs CPU rel %.3e\n", name, pv_dtype_name(t), nq, e);
		pv_session_free(g);
		pv_session_free(c);
		free(lg);
		free(lc);
		free(prompt);
	}
	pv_model_close(m);
	for (int i = 0; i < nq; i++) free(bufs[i]);
	json_decref(ref);
}

/* --------------------------------------------------------------------- real model --- */

#define TOL_REAL 1e-3 /* against transformers' float64 logits, as test_real            */
#define REAL_STEPS 16

/* The real Qwen2.5-Coder-0.5B Q4_K_M GGUF (tools/get-model.sh; Q5_0, Q8_0, Q4_K, Q6_K and F32
 * tensors, the embedding Q5_0) on CUDA and on the CPU, over the prompts of tests/data/real: every
 * prompt row's logits and REAL_STEPS teacher-forced one-row steps (fed transformers' greedy ids,
 * so a miss cannot cascade) within TOL_CPU of the CPU's, greedy ids (argmax of each row that
 * predicts a generated token) identical to the CPU's, and the reference top-20 logits within
 * TOL_REAL (as test_real). Skipped with a message when the file is absent (PV_REAL_MODEL names
 * it; else $PROVEN_CACHE or ~/.cache/proven). */
static void real_model(void)
{
	char buf[1024], err[512];
	const char* path = fx_real_model(buf, sizeof buf);
	if (!path) {
		t_skip("the real model is not available (set PV_REAL_MODEL or run tools/get-model.sh): nothing checked");
		return;
	}
	json_t* ref = json_load_file("tests/data/real/reference.json", 0, NULL);
	CHECK(ref != NULL, "tests/data/real/reference.json missing (run from the repository root)");
	if (!ref) return;
	pv_model *gm = NULL, *cm = NULL;
	/* f32 activations for every type, as the CPU's exact numerics (cuda.q8_act is the CPU's fast
	 * numerics for the K types: qgemv, quant) */
	struct pv_model_params gp = { .backend = "cuda", .knobs = "cuda.q8_act=0" };
	int rc = pv_model_open(&gm, path, &gp, err, sizeof(err));
	CHECK(rc == 0, "real model: open on cuda: %s", err);
	if (rc || pv_model_open(&cm, path, &cpu_exact, err, sizeof(err))) {
		CHECK(rc != 0, "real model: open on the CPU: %s", err);
		pv_model_close(gm);
		json_decref(ref);
		return;
	}
	const int V = pv_model_get_info(gm)->vocab;
	json_t* prompts = json_object_get(ref, "prompts");
	double worst_cpu = 0, worst_ref = 0;
	int steps = 0, same_ids = 0, ref_ids = 0;
	for (size_t pi = 0; pi < json_array_size(prompts); pi++) {
		json_t* p = json_array_get(prompts, pi);
		const char* name = json_string_value(json_object_get(p, "name"));
		int n = 0, ng = 0;
		int32_t* ids = fx_ids(json_object_get(p, "ids"), &n);
		int32_t* greedy = fx_ids(json_object_get(p, "greedy_ids"), &ng);
		if (ng > REAL_STEPS) ng = REAL_STEPS;
		pv_session* g = new_session(gm, n + REAL_STEPS + 1, 4);
		pv_session* c = new_session(cm, n + REAL_STEPS + 1, 4);
		float* lg = malloc(sizeof(float) * (size_t)V * n);
		float* lc = malloc(sizeof(float) * (size_t)V * n);
		int ok = g && c && n > 0 && eval_ok(g, ids, n, lg, PV_LOGITS_ALL) && eval_ok(c, ids, n, lc, PV_LOGITS_ALL);
		double e_cpu = ok ? rel_err(lg, lc, n, V) : 1, e_ref = 0;
		const float* last_g = lg + (size_t)(n - 1) * V;
		const float* last_c = lc + (size_t)(n - 1) * V;
		if (ok) e_ref = fx_max_err_ids(last_g, json_object_get(p, "next_top_ids"), json_object_get(p, "next_top_logits"));
		json_t* tf = json_object_get(p, "teacher_forced_top20");
		for (int i = 0; i < ng && ok; i++) {
			const int tg = pv_argmax(last_g, V), tcpu = pv_argmax(last_c, V);
			steps++;
			same_ids += tg == tcpu;
			ref_ids += tg == greedy[i];
			json_t* row = json_array_get(tf, i);
			if (row) {
				double er = fx_max_err_ids(last_g, json_object_get(row, "top_ids"), json_object_get(row, "top_logits"));
				e_ref = er > e_ref ? er : e_ref;
			}
			int32_t feed = greedy[i];
			ok = eval_ok(g, &feed, 1, lg, PV_LOGITS_LAST) && eval_ok(c, &feed, 1, lc, PV_LOGITS_LAST);
			if (!ok) break;
			ok = pv_cuda_last_token(g) == pv_argmax(lg, V);
			CHECK(ok, "real/%s: step %d: the GPU argmax differs from the argmax of its logits", name, i);
			last_g = lg;
			last_c = lc;
			const double e = rel_err(lg, lc, 1, V);
			e_cpu = e > e_cpu ? e : e_cpu;
		}
		CHECK(ok, "real/%s: evaluation failed", name);
		CHECK(e_cpu <= TOL_CPU, "real/%s: CUDA vs CPU rel error %.3g > %g", name, e_cpu, TOL_CPU);
		CHECK(e_ref <= TOL_REAL, "real/%s: CUDA vs transformers top-20 max |err| %.4g > %g", name, e_ref, TOL_REAL);
		printf("  real %-16s %3d tokens + %d steps: vs CPU rel %.3e, vs transformers top-20 max |err| %.3e\n", name, n, ng, e_cpu,
		       e_ref);
		worst_cpu = e_cpu > worst_cpu ? e_cpu : worst_cpu;
		worst_ref = e_ref > worst_ref ? e_ref : worst_ref;
		pv_session_free(g);
		pv_session_free(c);
		free(lg);
		free(lc);
		free(ids);
		free(greedy);
	}
	CHECK(steps > 0 && same_ids == steps, "real model: greedy ids: %d of %d steps agree between CUDA and the CPU", same_ids, steps);
	CHECK(ref_ids == steps, "real model: greedy ids: %d of %d steps agree with transformers", ref_ids, steps);
	if (worst_cpu > g_worst_cpu) g_worst_cpu = worst_cpu;
	printf("  real model %s: greedy %d/%d steps equal to the CPU's (%d/%d to transformers'); worst rel vs CPU %.3e, "
	       "top-20 vs transformers %.3e\n", path, same_ids, steps, ref_ids, steps, worst_cpu, worst_ref);
	pv_model_close(gm);
	pv_model_close(cm);
	json_decref(ref);
}

/* ------------------------------------------------------------------------- prefill --- */

/*
 * The prefill path (src/cuda/prefill.cu): calls of >= chunk_min_tokens rows through bf16 GEMMs.
 * Errors are relative to the row's max(1, max |logit|), against the exact 16-row path and against
 * transformers. They were measured beforehand with the CPU engine computing every layer matmul
 * from inputs rounded as the GPU rounds them (a local emulation, same fixtures and prompts; the
 * H200's first prefill run matched it to two digits, row for row):
 *   fast mode (default; bf16 GEMM inputs, unit roundoff 2^-9, f16 tensor-core attention):
 *     dense fixtures: at most 1.3e-2 over every prompt row (last rows <= 7e-3): TOL_PREFILL 2e-2,
 *     greedy ids equal except at near ties;
 *     hybrid (DeltaNet) fixtures: up to 0.30 in some rows (0.03 in last rows): these tiny random
 *     models amplify bf16 rounding ~150x, so they are checked for gross errors only
 *     (TOL_PREFILL_GROSS 0.6: a wrong state, layout or position gives O(1) and more);
 *   precise mode (pv_cuda_set_prefill on = 2: GEMM inputs as bf16 hi + lo, the f32 attention):
 *     at most 1.1e-3 (qwen3_5 multiturn), most fixtures <= 1.5e-4: TOL_PRECISE 3e-3 on every
 *     fixture, greedy ids equal except at near ties. This is the check of the plumbing.
 * Quantized weights are rounded to bf16 in both modes: TOL_PREFILL (they are dense fixtures).
 * A near tie: a step whose exact top-1 / top-2 gap is below 2 x the tolerance x max(1, max
 * |logit|) may pick either id (counted and printed, never a failure).
 */
#define TOL_PREFILL 2e-2
#define TOL_PREFILL_GROSS 0.6
#define TOL_PRECISE 3e-3
#define PREFILL_ROWS 200 /* prompt rows of the comparison (the fixtures' prompts, repeated) */
#define PREFILL_STEPS 16 /* greedy steps after the prompt                                 */

static double g_worst_prefill[2]; /* fast, precise */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static pv_session* prefill_session(pv_model* m, int ctx, int max_batch, int on, int chunk)
{
	char err[256];
	pv_session* s = NULL;
	/* chunk_min_tokens 17: every call above 16 rows takes the prefill path (when on) */
	struct pv_session_params p = { .n_ctx = ctx, .n_checkpoints = 4, .max_batch = max_batch, .chunk_min_tokens = 17 };
	if (pv_session_new(&s, m, &p, err, sizeof(err))) {
		fprintf(stderr, "session: %s\n", err);
		return NULL;
	}
	pv_cuda_set_prefill(s, on, chunk);
	return s;
}

/* top-1 minus top-2 of a row, and max(1, max |logit|) */
static double top_gap(const float* l, int V, double* scale)
{
	double a = -INFINITY, b = -INFINITY, mx = 1;
	for (int i = 0; i < V; i++) {
		if (l[i] > a) {
			b = a;
			a = l[i];
		} else if (l[i] > b) {
			b = l[i];
		}
		if (fabs(l[i]) > mx) mx = fabs(l[i]);
	}
	*scale = mx;
	return a - b;
}

/* 1 when x's argmax equals ref's or ref's top-2 gap is a near tie at tolerance tol */
static int same_or_tie(const float* x, const float* ref, int V, double tol, int* ties)
{
	if (pv_argmax(x, V) == pv_argmax(ref, V)) return 1;
	double sc, gap = top_gap(ref, V, &sc);
	if (gap <= 2 * tol * sc) {
		++*ties;
		return 1;
	}
	return 0;
}

/*
 * One prompt of np rows on five sessions of model m: the exact 16-row path, the prefill path in
 * one chunk, in chunks of 48 rows, in calls of 64 rows (session.c splits the call, so later
 * calls read the earlier calls' KV cache and DeltaNet state), and in one chunk with the other
 * attention and MoE kernels (PV_CUDA_PREFILL_ATTN=f32: the CUDA-core attention instead of the
 * tensor-core one; PV_CUDA_PREFILL_MOE=gemv: the decode's gathered expert GEMVs instead of the
 * grouped GEMMs; PV_CUDA_PREFILL_DELTA=cols: the DeltaNet rule a lane per state column, bitwise
 * the decode kernels, instead of four lanes per column), and in one chunk with the grouped expert
 * GEMMs' synchronous loader (PV_CUDA_PREFILL_MOE=sync: bitwise the default), and in one chunk with
 * the DeltaNet rule row by row (PV_CUDA_PREFILL_DELTA=quad; the default is the chunked WY form,
 * deltanet_wy.cu). The last row's logits, the GPU
 * argmax, PREFILL_STEPS greedy decode steps after it (fed the exact session's ids, so the rows
 * stay comparable) and the counters.
 */
static void prefill_case(const char* label, pv_model* m, const int32_t* prompt, int np, int V, int mode, double tol, int greedy)
{
	const int ctx = np + PREFILL_STEPS + 8;
	enum { EX, ONE, MULTI, CALLS, F32, SYNC, QUAD, NS };
	static const char* const sname[NS] = { "exact",       "one chunk", "chunks of 48", "calls of 64", "f32 attn, GEMV experts, delta cols",
		                               "sync expert loader", "delta quad" };
	pv_session* s[NS] = { prefill_session(m, ctx, 256, 0, 0), prefill_session(m, ctx, 256, mode, 0),
		              prefill_session(m, ctx, 256, mode, 48), prefill_session(m, ctx, 64, mode, 0), NULL };
	s[F32] = prefill_session(m, ctx, 256, mode, 0);
	/* the knobs are the model's, read at open; this session's own copy changes */
	if (s[F32] && pv_cuda_set_knobs(s[F32], "cuda.prefill_attn=f32,cuda.prefill_moe=gemv,cuda.prefill_delta=cols", NULL, 0)) {
		pv_session_free(s[F32]);
		s[F32] = NULL;
	}
	/* the grouped GEMMs' synchronous loader: the same tiles and MMAs as the pipelined one, so the same bits */
	s[SYNC] = prefill_session(m, ctx, 256, mode, 0);
	if (s[SYNC] && pv_cuda_set_knobs(s[SYNC], "cuda.prefill_moe=sync", NULL, 0)) {
		pv_session_free(s[SYNC]);
		s[SYNC] = NULL;
	}
	/* the DeltaNet rule row by row, four lanes per column (the default is the chunked form) */
	s[QUAD] = prefill_session(m, ctx, 256, mode, 0);
	if (s[QUAD] && pv_cuda_set_knobs(s[QUAD], "cuda.prefill_delta=quad", NULL, 0)) {
		pv_session_free(s[QUAD]);
		s[QUAD] = NULL;
	}
	float* l[NS];
	for (int i = 0; i < NS; i++) l[i] = malloc(sizeof(float) * (size_t)V);
	int ok = 1;
	for (int i = 0; i < NS; i++) ok &= s[i] != NULL;
	struct pv_cuda_session_stats st0[NS], st1[NS];
	for (int i = 0; i < NS && ok; i++) {
		pv_cuda_session_stats(s[i], &st0[i]);
		ok = eval_ok(s[i], prompt, np, l[i], PV_LOGITS_LAST);
		pv_cuda_session_stats(s[i], &st1[i]);
	}
	CHECK(ok, "prefill %s: evaluation failed", label);
	if (!ok) goto done;
	{
		double e[NS] = { 0 }, e_dec = 0;
		int ties = 0, same = 1;
		for (int i = 1; i < NS; i++) {
			e[i] = rel_err(l[i], l[EX], 1, V);
			same &= same_or_tie(l[i], l[EX], V, tol, &ties);
			CHECK(pv_cuda_last_token(s[i]) == pv_argmax(l[i], V), "prefill %s (%s): the GPU argmax differs from its logits' argmax",
			      label, sname[i]);
		}
		const double e_cm = rel_err(l[MULTI], l[ONE], 1, V);
		CHECK(memcmp(l[SYNC], l[ONE], sizeof(float) * (size_t)V) == 0,
		      "prefill %s: the synchronous expert loader's logits differ from the pipelined one's (rel %.3g)", label,
		      rel_err(l[SYNC], l[ONE], 1, V));
		/* counters: one prefill call per call of more than 16 rows, one host sync per call */
		int calls_64 = 0, ncalls_64 = 0;
		for (int off = 0; off < np; off += 64, ncalls_64++) calls_64 += np - off > 16;
		CHECK(st1[EX].prefill_calls == st0[EX].prefill_calls, "prefill %s: the exact session took the prefill path", label);
		CHECK(st1[ONE].prefill_calls - st0[ONE].prefill_calls == 1 && st1[MULTI].prefill_calls - st0[MULTI].prefill_calls == 1 &&
		          st1[CALLS].prefill_calls - st0[CALLS].prefill_calls == (uint64_t)calls_64,
		      "prefill %s: prefill calls %llu / %llu / %llu (want 1 / 1 / %d)", label,
		      (unsigned long long)(st1[ONE].prefill_calls - st0[ONE].prefill_calls),
		      (unsigned long long)(st1[MULTI].prefill_calls - st0[MULTI].prefill_calls),
		      (unsigned long long)(st1[CALLS].prefill_calls - st0[CALLS].prefill_calls), calls_64);
		CHECK(st1[ONE].syncs - st0[ONE].syncs == 1 && st1[CALLS].syncs - st0[CALLS].syncs == (uint64_t)ncalls_64,
		      "prefill %s: %llu host syncs for one call (want 1)", label, (unsigned long long)(st1[ONE].syncs - st0[ONE].syncs));
		/* greedy decode after the prompt: the state the prefill left behind */
		for (int k = 0; k < PREFILL_STEPS && ok; k++) {
			int32_t tok = pv_argmax(l[EX], V);
			for (int i = 0; i < NS && ok; i++) ok = eval_ok(s[i], &tok, 1, l[i], PV_LOGITS_LAST);
			for (int i = 1; i < NS && ok; i++) {
				const double ei = rel_err(l[i], l[EX], 1, V);
				e_dec = ei > e_dec ? ei : e_dec;
				same &= same_or_tie(l[i], l[EX], V, tol, &ties);
			}
		}
		CHECK(ok, "prefill %s: decode after the prompt failed", label);
		double worst = e_dec;
		for (int i = 1; i < NS; i++) worst = e[i] > worst ? e[i] : worst;
		worst = e_cm > worst ? e_cm : worst;
		CHECK(worst <= tol, "prefill %s: rel error %.3g > %g (one chunk %.3g, chunks of 48 %.3g, calls of 64 %.3g, "
		                            "alternative kernels %.3g, delta quad %.3g, 48 vs one %.3g, decode %.3g)",
		      label, worst, tol, e[ONE], e[MULTI], e[CALLS], e[F32], e[QUAD], e_cm, e_dec);
		CHECK(!greedy || same, "prefill %s: greedy ids differ from the exact path's beyond near ties", label);
		if (worst > g_worst_prefill[mode == 2]) g_worst_prefill[mode == 2] = worst;
		printf("  prefill %-7s %-18s %3d rows: vs exact rel %.2e (1 chunk) %.2e (48-row chunks) %.2e (64-row calls) %.2e (f32 "
		       "attention, GEMV experts, delta cols) %.2e (delta quad), 48 vs 1 %.2e; %d decode steps %.2e; greedy %s (near ties %d); "
		       "%llu kernels, %llu gemms per call\n",
		       mode == 2 ? "precise" : "fast", label, np, e[ONE], e[MULTI], e[CALLS], e[F32], e[QUAD], e_cm, PREFILL_STEPS, e_dec,
		       same ? "same" : greedy ? "DIFFERS" : "differs (not checked)", ties,
		       (unsigned long long)(st1[ONE].prefill_kernels - st0[ONE].prefill_kernels),
		       (unsigned long long)(st1[ONE].prefill_gemms - st0[ONE].prefill_gemms));
	}
done:
	for (int i = 0; i < NS; i++) {
		pv_session_free(s[i]);
		free(l[i]);
	}
}

/* The fixture's reference prompts through the prefill path (mode 1 fast, 2 precise), every row's
 * logits (PV_LOGITS_ALL: the LM head in 16-row groups) against transformers' within tol. */
static void prefill_reference(const char* name, pv_model* m, json_t* ref, const char* refpath, int V, int mode, double tol)
{
	json_t* cases = json_object_get(ref, "cases");
	for (size_t ci = 0; ci < json_array_size(cases); ci++) {
		json_t* c = json_array_get(cases, ci);
		const char* cname = json_string_value(json_object_get(c, "name"));
		char tname[64];
		snprintf(tname, sizeof(tname), "logits_%s", cname);
		int R = 0, C = 0, np = 0;
		float* lref = fx_read_f32(refpath, tname, &R, &C);
		int32_t* prompt = fx_ids(json_object_get(c, "prompt"), &np);
		CHECK(lref && C == V && R >= np, "%s/%s: reference logits missing", name, cname);
		pv_session* s = prefill_session(m, np + 8, 256, mode, 0);
		float* lg = malloc(sizeof(float) * (size_t)V * np);
		struct pv_cuda_session_stats a, b;
		int ok = lref && C == V && R >= np && s && (pv_cuda_session_stats(s, &a), eval_ok(s, prompt, np, lg, PV_LOGITS_ALL));
		if (ok) {
			pv_cuda_session_stats(s, &b);
			const double e = rel_err(lg, lref, np, V);
			CHECK(b.prefill_calls == a.prefill_calls + 1, "%s/%s: the prompt did not take the prefill path", name, cname);
			CHECK(e <= tol, "%s/%s: prefill (%s) vs transformers rel error %.3g > %g", name, cname, mode == 2 ? "precise" : "fast", e, tol);
			if (e > g_worst_prefill[mode == 2]) g_worst_prefill[mode == 2] = e;
			printf("  prefill %-7s %-16s %-9s %3d rows, every row vs transformers rel %.2e (tol %g)\n", mode == 2 ? "precise" : "fast",
			       name, cname, np, e, tol);
		} else {
			CHECK(0, "%s/%s: prefill evaluation failed", name, cname);
		}
		pv_session_free(s);
		free(lg);
		free(lref);
		free(prompt);
	}
}

/* The prefill's weight dequantization (the bf16 matrix its GEMMs multiply) against the CPU's
 * pv_tensor_row_f32 rounded to bf16 (round to nearest even, as __float2bfloat16_rn): bitwise, for
 * every type the GPU takes, through each kernel (Q8_0 / Q4_K / Q6_K by blocks, the rest and odd
 * widths element by element). */
static void prefill_dequant_check(void)
{
	static const enum pv_dtype types[] = { PV_F16, PV_F32, PV_BF16, PV_Q8_0, PV_Q4_0, PV_Q4_1, PV_Q5_0, PV_Q5_1, PV_Q4_K, PV_Q5_K, PV_Q6_K };
	static const int shapes[][2] = { { 37, 512 }, { 5, 1024 }, { 3, 96 } };
	char err[512];
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
		for (size_t si = 0; si < 3; si++) {
			const enum pv_dtype t = types[ti];
			const int rows = shapes[si][0], cols = shapes[si][1];
			if (cols % pv_dtype_block(t)) continue;
			void* w = make_matrix(t, rows, cols);
			if (!w) continue;
			struct pv_tensor W = { w, t, rows, cols };
			float* gpu = malloc(sizeof(float) * (size_t)rows * cols);
			float* glo = malloc(sizeof(float) * (size_t)rows * cols);
			float* row = malloc(sizeof(float) * (size_t)cols);
			int rc = pv_cuda_test_dequant(&W, gpu, glo, err, sizeof(err));
			CHECK(rc == 0, "prefill dequant %s [%d, %d]: %s", pv_dtype_name(t), rows, cols, err);
			int bad = 0, bad_lo = 0, lossy = 0;
			double worst = 0; /* |v - (hi + lo)| / |v| */
			for (int r = 0; r < rows && !rc; r++) {
				pv_tensor_row_f32(&W, r, row);
				for (int c = 0; c < cols; c++) {
					const uint32_t u = (uint32_t)to_bf16(row[c]) << 16;
					float ref, lref;
					memcpy(&ref, &u, 4);
					const size_t i = (size_t)r * cols + c;
					bad += memcmp(&ref, &gpu[i], 4) != 0;
					/* the precise mode's low half: bf16 of what the rounding left (exact in f32) */
					const uint32_t ul = (uint32_t)to_bf16(row[c] - ref) << 16;
					memcpy(&lref, &ul, 4);
					bad_lo += memcmp(&lref, &glo[i], 4) != 0;
					lossy += row[c] != ref;
					if (row[c] != 0) {
						const double e = fabs((double)row[c] - ((double)gpu[i] + (double)glo[i])) / fabs((double)row[c]);
						if (e > worst) worst = e;
					}
				}
			}
			CHECK(!rc && !bad, "prefill dequant %s [%d, %d]: %d of %d values differ from the CPU's (rounded to bf16)", pv_dtype_name(t),
			      rows, cols, bad, rows * cols);
			CHECK(!rc && !bad_lo, "prefill dequant %s [%d, %d]: %d of %d low halves differ from the CPU's", pv_dtype_name(t), rows, cols,
			      bad_lo, rows * cols);
			/* hi + lo carries 16 significant bits: 2^-16 relative, against bf16's 2^-8 */
			CHECK(!rc && worst <= 1.0 / 65536, "prefill dequant %s [%d, %d]: hi + lo is %.3g from the value (> 2^-16)", pv_dtype_name(t),
			      rows, cols, worst);
			CHECK(!rc && (t == PV_BF16 || lossy > 0), "prefill dequant %s [%d, %d]: no value lost bits in bf16, so the low halves are untested",
			      pv_dtype_name(t), rows, cols);
			free(gpu);
			free(glo);
			free(row);
			free(w);
		}
	printf("  prefill dequant: every type against the CPU's values rounded to bf16, and the low halves, bitwise\n");
}

/* PREFILL_ROWS rows from the fixture's first prompt, repeated */
static int32_t* prefill_prompt(json_t* ref, int* np)
{
	int nb = 0;
	int32_t* base = fx_ids(json_object_get(json_array_get(json_object_get(ref, "cases"), 0), "prompt"), &nb);
	int32_t* p = malloc(sizeof(int32_t) * PREFILL_ROWS);
	for (int i = 0; i < PREFILL_ROWS; i++) p[i] = nb ? base[i % nb] : 0;
	free(base);
	*np = PREFILL_ROWS;
	return p;
}

static void prefill_fixture(const char* name)
{
	char dir[600], path[700], err[512];
	snprintf(dir, sizeof(dir), "%s/%s", fx_root(), name);
	snprintf(path, sizeof(path), "%s/reference.json", dir);
	json_t* ref = json_load_file(path, 0, NULL);
	CHECK(ref != NULL, "%s: no reference.json", name);
	if (!ref) return;
	pv_model* m = NULL;
	struct pv_model_params gp = { .backend = "cuda" };
	int rc = pv_model_open(&m, dir, &gp, err, sizeof(err));
	CHECK(rc == 0, "%s: open on cuda: %s", name, err);
	if (!rc) {
		const int V = pv_model_get_info(m)->vocab;
		int hybrid = 0;
		for (int l = 0; l < m->cfg.n_layers; l++) hybrid |= m->cfg.layer_kind[l] == PV_LAYER_LINEAR;
		const double tol = hybrid ? TOL_PREFILL_GROSS : TOL_PREFILL;
		int np;
		int32_t* prompt = prefill_prompt(ref, &np);
		snprintf(path, sizeof(path), "%s/reference.safetensors", dir);
		prefill_case(name, m, prompt, np, V, 1, tol, !hybrid);
		prefill_reference(name, m, ref, path, V, 1, tol);
		prefill_case(name, m, prompt, np, V, 2, TOL_PRECISE, 1);
		prefill_reference(name, m, ref, path, V, 2, TOL_PRECISE);
		free(prompt);
	}
	pv_model_close(m);
	json_decref(ref);
}

/* A fixture with its matrices quantized (quantize_model): the prefill's dequantization path. */
static void prefill_quantized(const char* name, enum pv_dtype t)
{
	char dir[600], path[700], err[512], label[64];
	snprintf(dir, sizeof(dir), "%s/%s", fx_root(), name);
	snprintf(path, sizeof(path), "%s/reference.json", dir);
	snprintf(label, sizeof(label), "%s/%s", name, pv_dtype_name(t));
	json_t* ref = json_load_file(path, 0, NULL);
	pv_model* m = NULL;
	if (!ref || pv_model_open(&m, dir, NULL, err, sizeof(err))) {
		CHECK(0, "%s: cannot open", name);
		json_decref(ref);
		return;
	}
	void* bufs[128];
	int nq = quantize_model(m, t, bufs, 128);
	m->backend->model_free(m); /* the CPU's repacked weights would be stale after quantize_model */
	int rc = pv_cuda_model_init(m, 0, err, sizeof(err));
	CHECK(nq > 0 && rc == 0, "%s: upload: %s", label, err);
	if (nq > 0 && !rc) {
		int np;
		int32_t* prompt = prefill_prompt(ref, &np);
		prefill_case(label, m, prompt, np, m->cfg.vocab, 1, TOL_PREFILL, 1);
		prefill_case(label, m, prompt, np, m->cfg.vocab, 2, TOL_PREFILL, 1); /* weights rounded to bf16 in both modes */
		free(prompt);
	}
	pv_model_close(m);
	for (int i = 0; i < nq; i++) free(bufs[i]);
	json_decref(ref);
}

/* test_cuda prefill-bench: PV_PREFILL_MODEL (a model directory or GGUF, e.g. one of
 * device-check's `proven synth` files) on the GPU: prompts of 512 and 4096 random tokens in the
 * fast mode (3 timed runs each after a warm-up, rollback to 0 in between; tok/s from the wall
 * clock and from the prefill's CUDA events), 512 in the precise mode and through the exact 16-row
 * path; then the 512-token prompt's last-row logits of both modes against the exact path's, at
 * the model's real shapes (head dims, DeltaNet dims, expert counts the fixtures do not have):
 * reported, and checked against TOL_PREFILL_GROSS only (the amplification of a random-weight
 * model is unknown). Not part of the default run. */
static void prefill_bench(void)
{
	char err[512];
	const char* path = getenv("PV_PREFILL_MODEL");
	if (!path) {
		t_skip("set PV_PREFILL_MODEL to a model directory or GGUF file");
		return;
	}
	pv_model* m = NULL;
	struct pv_model_params gp = { .backend = "cuda", .verbose = 1 };
	if (pv_model_open(&m, path, &gp, err, sizeof(err))) {
		CHECK(0, "prefill-bench: %s: %s", path, err);
		return;
	}
	const int V = pv_model_get_info(m)->vocab, maxn = 4096;
	int32_t* toks = malloc(sizeof(int32_t) * maxn);
	float* lg = malloc(sizeof(float) * (size_t)V);
	float* l512[3]; /* exact, fast, precise */
	for (int i = 0; i < 3; i++) l512[i] = malloc(sizeof(float) * (size_t)V);
	int have512[3] = { 0, 0, 0 };
	uint32_t rng = 12345;
	for (int i = 0; i < maxn; i++) {
		rng = rng * 1664525u + 1013904223u;
		toks[i] = (int32_t)((rng >> 8) % (uint32_t)V);
	}
	printf("  prefill-bench %s (cuBLAS %s)\n", path, pv_cuda_prefill_available() ? "loaded" : "absent");
	static const int sizes[] = { 512, 4096 };
	static const int modes[] = { 1, 2, 0 };
	static const char* const mname[] = { "16-row", "prefill", "precise" };
	for (size_t mi = 0; mi < 3; mi++)
		for (size_t si = 0; si < 2; si++) {
			const int on = modes[mi], n = sizes[si];
			if (on != 1 && n > 512) continue;
			char e2[256];
			pv_session* s = NULL;
			struct pv_session_params sp = { .n_ctx = n + 16, .max_batch = n };
			if (pv_session_new(&s, m, &sp, e2, sizeof(e2))) {
				CHECK(0, "prefill-bench: session: %s", e2);
				continue;
			}
			pv_cuda_set_prefill(s, on, 0);
			const int reps = on == 1 ? 3 : 1;
			double best = 0, gpu_best = 0;
			int ok = eval_ok(s, toks, n, lg, PV_LOGITS_LAST); /* warm-up (cuBLAS handle, scratch) */
			for (int r = 0; r < reps && ok; r++) {
				struct pv_cuda_session_stats a, b;
				ok = pv_session_rollback(s, 0) == 0;
				pv_cuda_session_stats(s, &a);
				double t0 = now_s();
				ok = ok && eval_ok(s, toks, n, lg, PV_LOGITS_LAST);
				double t1 = now_s();
				pv_cuda_session_stats(s, &b);
				const double tps = n / (t1 - t0), gms = b.prefill_gpu_ms - a.prefill_gpu_ms;
				best = tps > best ? tps : best;
				if (gms > 0 && n / (gms * 1e-3) > gpu_best) gpu_best = n / (gms * 1e-3);
				if (r == 0 && on)
					printf("    pp%-5d %-8s %llu kernels, %llu gemms, %llu syncs per prompt\n", n, mname[on],
					       (unsigned long long)(b.prefill_kernels - a.prefill_kernels),
					       (unsigned long long)(b.prefill_gemms - a.prefill_gemms), (unsigned long long)(b.syncs - a.syncs));
			}
			CHECK(ok, "prefill-bench: pp%d (%s) failed", n, mname[on]);
			if (ok && n == 512) {
				memcpy(l512[on], lg, sizeof(float) * (size_t)V);
				have512[on] = 1;
			}
			printf("    pp%-5d %-8s %10.1f tok/s wall (best of %d)", n, mname[on], best, reps);
			if (on) printf(", %10.1f tok/s GPU (events)", gpu_best);
			printf("\n");
			pv_session_free(s);
		}
	if (have512[0] && have512[1] && have512[2]) {
		const double ef = rel_err(l512[1], l512[0], 1, V), ep = rel_err(l512[2], l512[0], 1, V);
		const int gf = pv_argmax(l512[1], V) == pv_argmax(l512[0], V), gpr = pv_argmax(l512[2], V) == pv_argmax(l512[0], V);
		printf("    pp512 last row vs the 16-row path: fast rel %.3e (argmax %s), precise rel %.3e (argmax %s)\n", ef,
		       gf ? "same" : "differs", ep, gpr ? "same" : "differs");
		CHECK(ef <= TOL_PREFILL_GROSS && ep <= TOL_PREFILL_GROSS, "prefill-bench: last row rel error fast %.3g, precise %.3g > %g",
		      ef, ep, TOL_PREFILL_GROSS);
	}
	for (int i = 0; i < 3; i++) free(l512[i]);
	free(toks);
	free(lg);
	pv_model_close(m);
}

/* The sections are cases (tests/harness.h): `test_cuda [section...]`, default all but the
 * manual ones (quick, prefill-bench); tools/cuda/device-check.sh runs one process per section
 * so that a fault in one cannot hide the others' results. quick is a small subset for
 * compute-sanitizer: a few GEMVs and the qwen3, qwen3_5 and qwen3_next fixtures. */
static int setup(void)
{
	char err[512];
	struct pv_cuda_device d;
	if (pv_cuda_device_info(&d, err, sizeof(err))) {
		CHECK(0, "no CUDA device: %s", err);
		return 1;
	}
	printf("test_cuda: %s (sm_%d%d, %d SMs, driver CUDA %d, runtime %d)\n", d.name, d.cc_major, d.cc_minor, d.sm_count,
	       d.driver_version, d.runtime_version);
	return 0;
}

static void teardown(void)
{
	printf("test_cuda: worst gemv error %.3e of sum |w x| (tol %g); worst logits rel error vs CPU %.3e (tol %g), "
	       "vs transformers %.3e (tol %g)\n",
	       g_worst_dot, TOL_DOT, g_worst_cpu, TOL_CPU, g_worst_ref, TOL_REL);
}

TEST_CASE_MANUAL(quick, "quick")
{
	g_rng = RNG_SEED;
	setenv("PV_CUDA_Q8_ACT", "0", 1);
	test_gemv_quick();
	unsetenv("PV_CUDA_Q8_ACT");
	fixture("qwen3");
	fixture("qwen3_5");
	fixture("qwen3_next");
}

TEST_CASE(gemv)
{
	g_rng = RNG_SEED;
	setenv("PV_CUDA_Q8_ACT", "0", 1); /* the float GEMVs (qgemv: the integer ones) */
	test_gemv();
	unsetenv("PV_CUDA_Q8_ACT");
}

TEST_CASE(qgemv)
{
	g_rng = RNG_SEED;
	test_qgemv();
}

TEST_CASE(norm)
{
	g_rng = RNG_SEED;
	test_norm();
}

TEST_CASE(fixtures)
{
	static char names[64][128];
	int n = fx_list(fx_root(), names, 64);
	CHECK(n >= 6, "expected the committed fixtures under %s, found %d", fx_root(), n);
	for (int i = 0; i < n; i++) fixture(names[i]);
}

TEST_CASE(quant)
{
	char err[512];
	g_rng = RNG_SEED;
	/* a type without a CUDA kernel (every GGUF type has one now: an invalid type) is
	 * refused with a message that says so */
	float wf[4 * 32] = { 0 }, x[32] = { 0 }, y[4];
	struct pv_tensor W = { wf, PV_DTYPE_COUNT, 4, 32 };
	int rc = pv_cuda_test_matmul(&W, x, 1, y, err, sizeof(err));
	CHECK(rc != 0 && strstr(err, "no CUDA kernel"), "invalid type: expected a clear refusal, got rc %d: %s", rc, err);
	/* the new types, one-row and small-row GEMVs against the CPU's matmul */
	static const enum pv_dtype nt[] = { PV_Q4_1, PV_Q5_0, PV_Q5_1, PV_Q5_K };
	for (size_t i = 0; i < sizeof nt / sizeof nt[0]; i++) {
		gemv_case(nt[i], 37, 512);
		gemv_case(nt[i], 300, 2816);
	}
	quantized("qwen3", PV_Q8_0);
	quantized("qwen3", PV_Q4_0);
	quantized("qwen2", PV_Q8_0);
	quantized("qwen3", PV_Q4_1);
	quantized("qwen3", PV_Q5_0);
	quantized("qwen3", PV_Q5_1);
	quantized("qwen2", PV_Q5_0);
	/* the gathered (MoE) GEMVs over quantized experts (gate and up: widths of 32) */
	quantized("qwen3_moe", PV_Q8_0);
	quantized("qwen3_moe", PV_Q5_0);
	quantized("qwen3_moe", PV_Q4_1);
	/* Q5_K needs widths of 256: the fixtures have none; its GEMVs are checked above */
}

TEST_CASE(real)
{
	real_model();
}

TEST_CASE(prefill)
{
	CHECK(pv_cuda_prefill_available(), "prefill: cuBLAS cannot be loaded (set PV_CUBLAS to libcublas.so.13)");
	if (!pv_cuda_prefill_available()) return;
	static char names[64][128];
	int n = fx_list(fx_root(), names, 64);
	prefill_dequant_check();
	for (int i = 0; i < n; i++) prefill_fixture(names[i]);
	prefill_quantized("qwen3", PV_Q8_0);
	prefill_quantized("qwen2", PV_Q4_0);
	prefill_quantized("qwen3_moe", PV_Q8_0);
	printf("test_cuda: worst prefill rel error: fast %.3e (dense tol %g), precise %.3e (tol %g)\n", g_worst_prefill[0], TOL_PREFILL,
	       g_worst_prefill[1], TOL_PRECISE);
}

TEST_CASE_MANUAL(prefill_bench, "prefill-bench")
{
	prefill_bench();
}

int main(int argc, char** argv)
{
	return t_main(argc, argv, "test_cuda", setup, teardown);
}

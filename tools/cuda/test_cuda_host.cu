/*
 * test_cuda_host.cu: the CUDA backend's weight decoders, on the host (no GPU needed; part of
 * `make test` whenever the CUDA backend is built). units.cuh holds one copy of each decoder for
 * both the device and the host; this checks, for every weight type the backend runs:
 *   - the upload's plane split, then each GEMV unit's load + dequantization: with a one-hot
 *     activation, a unit's dot product is the weight itself, equal to pv_dequant_row's
 *   - the order: a unit's fmaf chain over a random activation equals the same chain written
 *     out over pv_dequant_row's weights in increasing element order, bit for bit
 *   - the embedding lookup's per-element dequantization, bit for bit
 */
#include "cuda/common.cuh"
#include "cuda/units.cuh"

#include <math.h>
#include <stdlib.h>

#include "harness.h"

using namespace pv_units;

static uint32_t g_rng = 0x9e3779b9u;
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

template <int K>
struct Load {
	static typename Kern<K>::Raw load(const Seg& s, int64_t row, int u, int stype) { return Kern<K>::load(s, row, u); }
};
template <>
struct Load<K_SCALAR> {
	static Kern<K_SCALAR>::Raw load(const Seg& s, int64_t row, int u, int stype) { return Kern<K_SCALAR>::load_t(s, row, u, stype); }
};

template <int K>
static void check(enum pv_dtype t, int rows, int cols, const char* label)
{
	char err[256];
	const size_t rb = pv_dtype_row_bytes(t, cols);
	unsigned char* w = (unsigned char*)malloc(rb * (size_t)rows);
	float* f = (float*)malloc(sizeof(float) * (size_t)cols);
	float* ref = (float*)malloc(sizeof(float) * (size_t)cols * rows);
	for (int r = 0; r < rows; r++) {
		for (int c = 0; c < cols; c++) f[c] = frand() * 0.1f * (1 + r);
		unsigned char* dst = w + rb * (size_t)r;
		if (t == PV_F32) memcpy(dst, f, rb);
		else if (t == PV_BF16 || t == PV_F16)
			for (int c = 0; c < cols; c++) {
				uint16_t h = t == PV_BF16 ? to_bf16(f[c]) : pv_f32_to_f16(f[c]);
				memcpy(dst + 2 * c, &h, 2);
			}
		else CHECK(pv_quant_row(t, f, dst, cols) == 0, "%s: quantize", label);
		pv_dequant_row(t, dst, ref + (size_t)r * cols, cols);
	}
	struct pv_tensor T = { w, t, rows, cols };
	struct dmat d;
	int rc = pv_cuda_plan_mat(&T, &d, err, sizeof err);
	CHECK(rc == 0, "%s: plan: %s", label, err);
	unsigned char* planes[PV_CUDA_MAX_PLANES] = { NULL, NULL, NULL };
	for (int p = 0; p < d.n_planes; p++) {
		planes[p] = (unsigned char*)aligned_alloc(16, (d.stride[p] * (size_t)rows + 15) / 16 * 16);
		for (int r = 0; r < rows; r++)
			extract_plane(d.type, d.cols, d.stride[0], p, w + rb * (size_t)r, planes[p] + d.stride[p] * (size_t)r);
	}
	Seg s;
	memset(&s, 0, sizeof s);
	s.p0 = planes[0];
	s.p1 = planes[1];
	s.p2 = planes[2];
	s.s0 = d.stride[0];
	s.s1 = d.stride[1];
	s.s2 = d.stride[2];
	Planes pl = { planes[0], planes[1], planes[2], d.stride[0], d.stride[1], d.stride[2], (int)t };

	constexpr int UE = Kern<K>::UE;
	float* xs = (float*)aligned_alloc(16, sizeof(float) * (size_t)cols);
	int bad_map = 0, bad_order = 0, bad_elem = 0;
	for (int r = 0; r < rows; r++) {
		const float* rr = ref + (size_t)r * cols;
		for (int c = 0; c < cols; c++) {
			const float e = dq_elem(pl, r, c);
			bad_elem += memcmp(&rr[c], &e, 4) != 0;
		}
		for (int u = 0; u < cols / UE; u++) {
			typename Kern<K>::Raw raw = Load<K>::load(s, r, u, (int)t);
			/* one-hot: the unit's product is the weight at that column */
			for (int j = 0; j < UE && bad_map < 5; j++) {
				memset(xs, 0, sizeof(float) * (size_t)cols);
				xs[u * UE + j] = 1.0f;
				float acc = 0.0f;
				Kern<K>::template dot<1>(raw, xs, cols, u * UE, &acc);
				if (!(acc == rr[u * UE + j])) {
					if (!bad_map)
						fprintf(stderr, "%s: row %d unit %d element %d: %g, want %g\n", label, r, u, j, acc, rr[u * UE + j]);
					bad_map++;
				}
			}
			/* order: the chain over a random activation, against the same chain written out */
			for (int c = 0; c < cols; c++) xs[c] = frand();
			float acc = 0.25f, want = 0.25f;
			Kern<K>::template dot<1>(raw, xs, cols, u * UE, &acc);
			for (int j = 0; j < UE; j++) want = fmaf(rr[u * UE + j], xs[u * UE + j], want);
			bad_order += memcmp(&acc, &want, 4) != 0;
		}
	}
	CHECK(!bad_map, "%s: %d unit elements decode to the wrong weight", label, bad_map);
	CHECK(!bad_order, "%s: %d units accumulate in another order than element order", label, bad_order);
	CHECK(!bad_elem, "%s: %d embedding elements differ from pv_dequant_row", label, bad_elem);
	printf("  %-14s [%d, %d]: unit decode, order and embedding lookup %s\n", label, rows, cols,
	       bad_map || bad_order || bad_elem ? "WRONG" : "exact");
	for (int p = 0; p < d.n_planes; p++) free(planes[p]);
	free(xs);
	free(w);
	free(f);
	free(ref);
}

int main(void)
{
	check<K_BF16>(PV_BF16, 3, 768, "bf16");
	check<K_F16>(PV_F16, 3, 768, "f16");
	check<K_F32>(PV_F32, 3, 768, "f32");
	check<K_SCALAR>(PV_BF16, 3, 203, "bf16 (odd)");
	check<K_SCALAR>(PV_F16, 3, 203, "f16 (odd)");
	check<K_SCALAR>(PV_F32, 3, 203, "f32 (odd)");
	check<K_Q8_0>(PV_Q8_0, 3, 768, "q8_0");
	check<K_Q4_0>(PV_Q4_0, 3, 768, "q4_0");
	check<K_Q4_K>(PV_Q4_K, 3, 768, "q4_k");
	check<K_Q6_K>(PV_Q6_K, 3, 768, "q6_k");
	TEST_END("test_cuda_host");
}

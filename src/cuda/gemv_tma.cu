/*
 * gemv_tma.cu: the one-row GEMV for 16-byte-unit weight rows (BF16, F16, F32) with its weights
 * brought into shared memory by the bulk copy engine (cp.async.bulk, an mbarrier per stage).
 *
 * Why: at batch 1 a GEMV only streams weights; what limits it is how many bytes each SM keeps in
 * flight, and the ramp at each kernel's start. The register walk of gemv.cu has U = 4 16-byte
 * loads per lane in flight (64 KB per SM at 4 blocks of 8 warps) and starts loading only after the
 * previous kernel has finished (the PDL wait). Here each warp owns one weight row (as in gemv.cu)
 * and a ring of NS = 4 stages of SB = 2 KiB in shared memory: lane 0 asks the copy engine for the
 * row's first four stages *before* the PDL wait (weights never depend on earlier kernels), then
 * refills a stage as soon as the warp has consumed it. 64 KiB per block, 3 blocks per SM: 192 KiB
 * in flight per SM, no registers held for it.
 *
 * Measured slower than gemv.cu's register walk on the H200 (PERF.md, "Tuning switches": the
 * figures): a warp's ring refills one stage per consumed stage, so a 24 KiB row (down) takes
 * three dependent round trips after the first four stages, and 3 blocks per SM leave fewer rows
 * in flight than 4 blocks of the register walk. Off by default (cuda.gemv_tma = 1, 2, 3: on),
 * kept for the A/B and as the base of a block-wide ring (the next attempt: one ring per block over
 * 8 rows, 32-64 KiB stages).
 *
 * Summation order (bitwise the walk of gemv.cu, so batch invariance is kept): a stage holds units
 * [128 ks, 128 ks + 128) of the row (a unit is 16 bytes: 8 BF16/F16 or 4 F32 elements); lane l
 * takes units 128 ks + l + 32 q, q = 0..3, in order: over the whole row, lane l visits units
 * l, l + 32, l + 64, ... in increasing order with one fmaf per element, exactly walk()'s lane
 * order (units.cuh); the lanes are added by pv_warp_sum, a bias after. A gate/up pair (SwiGLU) is
 * one warp doing gate row j then up row j, the epilogue silu(g) * u as gemv.cu's pair.
 */
#include "common.cuh"
#include "units.cuh"

namespace {

using namespace pv_units;

constexpr int WARPS = 8;
constexpr int THREADS = WARPS * 32;
/* stage size SB and ring depth NS per variant (cuda.gemv_tma = 1: 2 KiB x 4, 2: 4 KiB x 3,
 * 3: 8 KiB x 2): fewer, larger copies per warp, fewer blocks per SM */
template <int SB, int NS>
constexpr int smem_of() { return WARPS * NS * SB; }

struct TParams {
	Seg seg[3];
	int nseg;
	int row_bytes; /* bytes of one weight row: cols / UE * 16 */
	int pair;      /* seg[0] = gate, seg[1] = up: y0 = silu(gate x) * (up x) */
	const float* x;
	int ldx;
};

__device__ __forceinline__ uint32_t saddr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(saddr(bar)), "r"(count) : "memory");
}

/* lane 0: this stage's barrier expects `bytes`, and the copy engine brings them */
__device__ __forceinline__ void stage_load(uint64_t* bar, void* dst, const unsigned char* src, uint32_t bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(saddr(bar)), "r"(bytes) : "memory");
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(saddr(dst)),
	             "l"(src), "r"(bytes), "r"(saddr(bar))
	             : "memory");
}

__device__ __forceinline__ void stage_wait(uint64_t* bar, uint32_t parity)
{
	uint32_t done;
	do {
		asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
		             : "=r"(done)
		             : "r"(saddr(bar)), "r"(parity)
		             : "memory");
	} while (!done);
}

template <int K, int SB, int NS>
__global__ void __launch_bounds__(THREADS) gemv_tma_kernel(const __grid_constant__ TParams p)
{
	constexpr int UPL = SB / 16 / 32; /* units per lane per stage */
	using KT = Kern<K>;
	constexpr int UE = KT::UE;
	extern __shared__ __align__(128) unsigned char ring_all[];
	__shared__ __align__(8) uint64_t bars[WARPS][NS];

	const int b = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const Seg* sp = &p.seg[0];
	if (!p.pair && p.nseg > 1 && b >= p.seg[1].block0) sp = &p.seg[1];
	if (!p.pair && p.nseg > 2 && b >= p.seg[2].block0) sp = &p.seg[2];
	const Seg& s = *sp;
	const int64_t row = (int64_t)(b - s.block0) * WARPS + warp;
	const int RB = p.row_bytes, nst = (RB + SB - 1) / SB, total = p.pair ? 2 * nst : nst;
	unsigned char* ring = ring_all + (size_t)warp * NS * SB;
	uint64_t* bar = bars[warp];
	const bool live = row < s.rows;

	/* stage k: row k / nst of the pair (0 unless pair), bytes [SB (k % nst), ...) of it */
	auto issue = [&](int k) {
		const int sg = k >= nst, ks = k - sg * nst;
		const Seg& q = sg ? p.seg[1] : s;
		const int bytes = min(SB, RB - ks * SB);
		stage_load(&bar[k % NS], ring + (k % NS) * SB, q.p0 + (size_t)row * q.s0 + (size_t)ks * SB, (uint32_t)bytes);
	};
	if (live && lane == 0) {
		for (int i = 0; i < NS; i++) mbar_init(&bar[i], 1);
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
		asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
		for (int k = 0; k < NS && k < total; k++) issue(k); /* before the PDL wait: weights are constant */
	}
	__syncwarp();
	pv_grid_sync(); /* x is the previous kernel's output */
	if (!live) return;

	float acc0 = 0.0f, acc1 = 0.0f; /* the row (gate), the up row of a pair */
	for (int k = 0; k < total; k++) {
		const int slot = k % NS;
		stage_wait(&bar[slot], (uint32_t)((k / NS) & 1));
		const int sg = k >= nst, ks = k - sg * nst;
		const int units = min(SB, RB - ks * SB) / 16;
		const uint4* src = reinterpret_cast<const uint4*>(ring + slot * SB);
		if (sg) {
#pragma unroll
			for (int q = 0; q < UPL; q++) {
				const int u = lane + 32 * q;
				if (u < units) KT::template dot<1>(typename KT::Raw{ src[u] }, p.x, p.ldx, (ks * (SB / 16) + u) * UE, &acc1);
			}
		} else {
#pragma unroll
			for (int q = 0; q < UPL; q++) {
				const int u = lane + 32 * q;
				if (u < units) KT::template dot<1>(typename KT::Raw{ src[u] }, p.x, p.ldx, (ks * (SB / 16) + u) * UE, &acc0);
			}
		}
		__syncwarp(); /* every lane has read the slot */
		if (lane == 0 && k + NS < total) {
			asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
			issue(k + NS);
		}
	}

	if (p.pair) {
		float g = pv_warp_sum(acc0);
		float u = pv_warp_sum(acc1);
		if (lane == 0) {
			if (s.bias) g = g + s.bias[row];
			if (p.seg[1].bias) u = u + p.seg[1].bias[row];
			s.y[row] = (g / (1.0f + expf(-g))) * u; /* pv_silu(gate) * up, as gemv.cu's pair */
		}
		return;
	}
	const float v = pv_warp_sum(acc0);
	if (lane == 0) s.y[row] = s.bias ? v + s.bias[row] : v;
}

int kind_tma(const struct dmat* w)
{
	switch (w->type) {
	case PV_BF16: return (w->cols * 2) % 16 ? -1 : K_BF16;
	case PV_F16: return (w->cols * 2) % 16 ? -1 : K_F16;
	case PV_F32: return (w->cols * 4) % 16 ? -1 : K_F32;
	default: return -1;
	}
}

int elem_bytes(int kind) { return kind == K_F32 ? 4 : 2; }

template <int SB, int NS>
int init_variant(char* err, size_t errlen)
{
	CU(cudaFuncSetAttribute(gemv_tma_kernel<K_BF16, SB, NS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_of<SB, NS>()), err, errlen);
	CU(cudaFuncSetAttribute(gemv_tma_kernel<K_F16, SB, NS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_of<SB, NS>()), err, errlen);
	CU(cudaFuncSetAttribute(gemv_tma_kernel<K_F32, SB, NS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_of<SB, NS>()), err, errlen);
	return 0;
}

template <int SB, int NS>
void (*kernel_of(int kind))(TParams)
{
	return kind == K_BF16 ? gemv_tma_kernel<K_BF16, SB, NS> : kind == K_F16 ? gemv_tma_kernel<K_F16, SB, NS> : gemv_tma_kernel<K_F32, SB, NS>;
}

} // namespace

static int ready = 0; /* the kernels' shared-memory limits raised (outside any capture) */

int pv_cuda_gemv_tma_init(char* err, size_t errlen)
{
	if (init_variant<2048, 4>(err, errlen) || init_variant<4096, 3>(err, errlen) || init_variant<8192, 2>(err, errlen)) return -1;
	ready = 1;
	return 0;
}

int pv_cuda_gemv_tma(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct gemv_out* outs, int n_out, const float* x,
                     int ldx, int pair, int* n_launch, char* err, size_t errlen)
{
	if (!tu->gemv_tma) return 0;
	if (!ready) {
		cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
		if (cudaStreamIsCapturing(st, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return 0;
		if (pv_cuda_gemv_tma_init(err, errlen)) return -1;
		ready = 1;
	}
	if (n_out < 1 || n_out > 3 || (pair && n_out != 2) || ((uintptr_t)x & 15) || ldx % 4) return 0;
	const int kind = kind_tma(outs[0].w);
	if (kind < 0) return 0;
	for (int i = 0; i < n_out; i++) {
		const struct dmat* w = outs[i].w;
		if (kind_tma(w) != kind || w->type != outs[0].w->type || w->cols != outs[0].w->cols || w->rows > INT32_MAX / 2 ||
		    w->cols > INT32_MAX / 16 || (pair && w->rows != outs[0].w->rows) || ((uintptr_t)w->p[0] & 15) || (w->stride[0] & 15))
			return 0;
	}
	TParams p;
	memset(&p, 0, sizeof p);
	p.nseg = n_out;
	p.row_bytes = (int)(outs[0].w->cols * elem_bytes(kind));
	p.pair = pair;
	p.x = x;
	p.ldx = ldx;
	int64_t blocks = 0;
	for (int i = 0; i < n_out; i++) {
		const struct dmat* w = outs[i].w;
		Seg& s = p.seg[i];
		s.p0 = w->p[0];
		s.s0 = w->stride[0];
		s.y = outs[i].y;
		s.ldy = outs[i].ldy;
		s.bias = outs[i].bias;
		s.rows = (int)w->rows;
		s.block0 = (int)blocks;
		if (!pair || i == 0) blocks += (s.rows + WARPS - 1) / WARPS;
	}
	if (blocks <= 0 || blocks > INT32_MAX) return 0;
	const int v = tu->gemv_tma;
	void (*kern)(TParams) = v == 3   ? kernel_of<8192, 2>(kind)
	                        : v == 2 ? kernel_of<4096, 3>(kind)
	                                 : kernel_of<2048, 4>(kind);
	const int smem = v == 3 ? smem_of<8192, 2>() : v == 2 ? smem_of<4096, 3>() : smem_of<2048, 4>();
	PV_LAUNCH("gemv tma", tu, err, errlen, kern, dim3((unsigned)blocks), dim3(THREADS), (size_t)smem, st, p);
	if (n_launch) ++*n_launch;
	return 1;
}

/* test_sampler.c: greedy, reproducibility from the seed, top-k/top-p restrictions, frequencies. */
#include "harness.h"
#include "proven_text.h"

#include <math.h>
#include <string.h>

enum { V = 50 };
static float lg[V];
static int arg; /* argmax of lg */

static void logits(void)
{
	for (int i = 0; i < V; i++) lg[i] = (float)sin(i * 1.7) * 3.0f;
	arg = 0;
	for (int i = 1; i < V; i++) if (lg[i] > lg[arg]) arg = i;
}

TEST_CASE(greedy)
{
	logits();
	struct pv_sampler_params greedy = { 0, 0, 1, 1 };
	struct pv_sampler* s = pv_sampler_new(&greedy, V);
	CHECK(pv_sampler_pick(s, lg, V) == arg, "temperature 0 is argmax");
	CHECK(pv_sampler_pick(s, lg, 10) < 10, "n_valid bounds the choice");
	pv_sampler_free(s);
}

TEST_CASE(seed)
{
	logits();
	struct pv_sampler_params p = { 0.8f, 0, 1, 42 };
	struct pv_sampler *a = pv_sampler_new(&p, V), *b = pv_sampler_new(&p, V);
	int same = 1;
	for (int i = 0; i < 200; i++) same &= pv_sampler_pick(a, lg, V) == pv_sampler_pick(b, lg, V);
	CHECK(same, "same seed, same stream");
	pv_sampler_free(a);
	pv_sampler_free(b);
}

TEST_CASE(top_k)
{
	logits();
	struct pv_sampler_params k1 = { 1.5f, 1, 1, 7 };
	struct pv_sampler* s = pv_sampler_new(&k1, V);
	int all = 1;
	for (int i = 0; i < 100; i++) all &= pv_sampler_pick(s, lg, V) == arg;
	CHECK(all, "top-k 1 is greedy");
	pv_sampler_free(s);

	/* top-k 3: only the three best ids appear */
	int order[V];
	for (int i = 0; i < V; i++) order[i] = i;
	for (int i = 0; i < V; i++)
		for (int j = i + 1; j < V; j++)
			if (lg[order[j]] > lg[order[i]]) { int t = order[i]; order[i] = order[j]; order[j] = t; }
	struct pv_sampler_params k3 = { 1.0f, 3, 1, 9 };
	s = pv_sampler_new(&k3, V);
	int ok = 1;
	for (int i = 0; i < 500; i++) {
		int t = pv_sampler_pick(s, lg, V);
		ok &= t == order[0] || t == order[1] || t == order[2];
	}
	CHECK(ok, "top-k 3 stays in the top 3");
	pv_sampler_free(s);
}

TEST_CASE(frequencies)
{
	/* frequencies at temperature 1 follow softmax within a few standard deviations */
	float two[2] = { 0.0f, logf(3.0f) }; /* p = 0.25, 0.75 */
	struct pv_sampler_params t1 = { 1.0f, 0, 1, 3 };
	struct pv_sampler* s = pv_sampler_new(&t1, 2);
	int n1 = 0, N = 20000;
	for (int i = 0; i < N; i++) n1 += pv_sampler_pick(s, two, 2) == 1;
	double sd = sqrt(N * 0.75 * 0.25);
	CHECK(fabs(n1 - 0.75 * N) < 5 * sd, "frequency %d vs expected %.0f", n1, 0.75 * N);
	pv_sampler_free(s);
}

TEST_CASE(top_p)
{
	/* top-p 0.5 keeps only the 0.75 token */
	float two[2] = { 0.0f, logf(3.0f) }; /* p = 0.25, 0.75 */
	struct pv_sampler_params tp = { 1.0f, 0, 0.5f, 3 };
	struct pv_sampler* s = pv_sampler_new(&tp, 2);
	int all = 1;
	for (int i = 0; i < 1000; i++) all &= pv_sampler_pick(s, two, 2) == 1;
	CHECK(all, "top-p 0.5 keeps only the most likely token");
	pv_sampler_free(s);
}

TEST_MAIN("test_sampler")

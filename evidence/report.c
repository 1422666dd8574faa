/*
 * report.c: the static evidence page and its release gate (issue 13).
 *
 * ev_report_write: DIR/index.html (inline CSS and SVG, no script, no external asset) from the
 * store, and DIR/receipts/ID.json for every receipt the page cites. Every number shown as a
 * figure is a table row <tr class="fig" data-receipt data-figure data-scope data-value
 * data-sha256>: the gate can tie it to its receipt. The page's own digest is in
 * <meta name="proven-source-sha256">: the sha256 of the page with that value replaced by 64 zeros.
 *
 * ev_report_check_static: the gate without a browser. ev_report_check_shots: the layout, from
 * headless Chromium's screenshots (PNG, decoded here with zlib): the page must not draw into the
 * right margin at phone width (content wider than the viewport spills there) and must not be
 * blank. Chromium renders at most ~16k device pixels of height, so the pages are shot at half
 * scale in tall windows (60000 CSS px at phone width) to see the whole page.
 */
#include "store.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define ZERO64 "0000000000000000000000000000000000000000000000000000000000000000"

/* ==== A growing string ========================================================================== */

struct buf {
	char* s;
	size_t n, cap;
	int oom;
};

static void bput(struct buf* b, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void bput(struct buf* b, const char* fmt, ...)
{
	va_list ap;
	for (;;) {
		va_start(ap, fmt);
		int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
		va_end(ap);
		if (k < 0) return;
		if (b->s && b->n + (size_t)k < b->cap) {
			b->n += (size_t)k;
			return;
		}
		size_t nc = (b->cap ? b->cap * 2 : 65536) + (size_t)k;
		char* ns = realloc(b->s, nc);
		if (!ns) {
			b->oom = 1;
			return;
		}
		b->s = ns;
		b->cap = nc;
	}
}

/* text with &, <, >, " escaped */
static void besc(struct buf* b, const char* s)
{
	for (; s && *s; s++) {
		switch (*s) {
		case '&': bput(b, "&amp;"); break;
		case '<': bput(b, "&lt;"); break;
		case '>': bput(b, "&gt;"); break;
		case '"': bput(b, "&quot;"); break;
		default: bput(b, "%c", *s);
		}
	}
}

static const char* sget(const json_t* o, const char* k) { return json_string_value(json_object_get(o, k)); }
static const char* sor(const char* s, const char* d) { return s && s[0] ? s : d; }

static double fig_value(const json_t* r, const char* name, const char** scope, const char** unit)
{
	size_t i;
	json_t* f;
	json_array_foreach(json_object_get(r, "figures"), i, f)
	if (!strcmp(sor(sget(f, "name"), ""), name)) {
		if (scope) *scope = sget(f, "scope");
		if (unit) *unit = sget(f, "unit");
		return json_number_value(json_object_get(f, "value"));
	}
	return NAN;
}

/* ==== Writing =================================================================================== */

struct rep {
	struct buf b;
	json_t* cited; /* id (as text) -> receipt */
	const char* dir;
	char root_rel[4096]; /* the repository root relative to DIR ("" when unknown) */
};

static void cite(struct rep* r, const json_t* rec)
{
	char k[32];
	snprintf(k, sizeof k, "%lld", (long long)json_integer_value(json_object_get(rec, "id")));
	if (!json_object_get(r->cited, k)) json_object_set(r->cited, k, (json_t*)rec);
}

static void receipt_link(struct rep* r, const json_t* rec)
{
	long long id = (long long)json_integer_value(json_object_get(rec, "id"));
	bput(&r->b, "<a href=\"receipts/%lld.json\">#%lld</a>", id, id);
	cite(r, rec);
}

/* A row of the figures table: one figure of one receipt, with what the gate needs. */
static void fig_row(struct rep* r, const json_t* rec, const json_t* f, const char* what)
{
	const char* scope = sget(f, "scope");
	double v = json_number_value(json_object_get(f, "value"));
	bput(&r->b, "<tr class=\"fig\" data-receipt=\"%lld\" data-figure=\"", (long long)json_integer_value(json_object_get(rec, "id")));
	besc(&r->b, sget(f, "name"));
	bput(&r->b, "\" data-scope=\"%s\" data-value=\"%.17g\" data-sha256=\"%s\"><td>", scope, v, sor(sget(rec, "sha256"), ""));
	besc(&r->b, what);
	bput(&r->b, "</td><td>");
	besc(&r->b, sget(f, "name"));
	bput(&r->b, "</td><td class=\"n\">%.4g</td><td>", v);
	besc(&r->b, sget(f, "unit"));
	bput(&r->b, "</td><td><span class=\"sc\">%s</span></td><td>", scope);
	receipt_link(r, rec);
	bput(&r->b, "</td></tr>\n");
}

/* What a receipt measured, in a few words: model, backend, threads, shape, host. */
static void conditions(char* out, size_t n, const json_t* rec)
{
	const json_t* rt = json_object_get(rec, "runtime");
	const json_t* m = json_object_get(rec, "model");
	const json_t* w = json_object_get(rec, "workload");
	const json_t* h = json_object_get(rec, "host");
	const char* path = sget(m, "path");
	const char* base = path && strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	char thr[32] = "";
	if (json_is_integer(json_object_get(rt, "threads"))) snprintf(thr, sizeof thr, ", %lld threads", (long long)json_integer_value(json_object_get(rt, "threads")));
	char host[96] = "";
	if (!json_is_true(json_object_get(rec, "imported")))
		snprintf(host, sizeof host, "; load %.2f, foreign %.0f%%", json_number_value(json_object_get(json_object_get(h, "before"), "load1")),
		         100 * json_number_value(json_object_get(h, "foreign_share")));
	const json_t* gpu = json_object_get(rt, "gpu");
	snprintf(out, n, "%s (%s) on %s%s%s%s; %s, prompt %lld, gen %lld, depth %lld%s", sor(base, "no model"), sor(sget(m, "arch"), "-"),
	         sor(sget(rt, "backend"), "?"), json_is_object(gpu) ? " " : "", json_is_object(gpu) ? sor(sget(gpu, "name"), "") : "", thr,
	         sor(sget(w, "class"), "-"), (long long)json_integer_value(json_object_get(w, "n_prompt")),
	         (long long)json_integer_value(json_object_get(w, "n_gen")), (long long)json_integer_value(json_object_get(w, "depth")), host);
}

/* ---- SVG plots ------------------------------------------------------------------------------- */

struct pt {
	double x, y, lo, hi;
	long long id;
	char label[48];
};

static double nice_max(double v)
{
	if (!(v > 0)) return 1;
	double p = pow(10, floor(log10(v)));
	for (double m = 1; m <= 10; m *= 2)
		if (m * p >= v) return m * p;
	return 10 * p;
}

/* A line plot of series (x, y); each point's <title> names its receipt. */
static void svg_lines(struct rep* r, const char* label, const char* xl, const char* yl, struct pt* const* series, const int* np,
                      const char* const* names, int ns)
{
	const int W = 640, H = 300, L = 56, R = 12, T = 14, B = 44;
	double xmax = 0, ymax = 0;
	for (int s = 0; s < ns; s++)
		for (int i = 0; i < np[s]; i++) {
			xmax = series[s][i].x > xmax ? series[s][i].x : xmax;
			ymax = series[s][i].y > ymax ? series[s][i].y : ymax;
		}
	xmax = nice_max(xmax);
	ymax = nice_max(ymax);
	static const char* colors[] = { "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b" };
	bput(&r->b, "<figure><svg role=\"img\" aria-label=\"");
	besc(&r->b, label);
	bput(&r->b, "\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\"><title>", W, H, W, H);
	besc(&r->b, label);
	bput(&r->b, "</title><rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>", W, H);
	for (int k = 0; k <= 4; k++) {
		double y = T + (H - T - B) * (1 - k / 4.0);
		bput(&r->b, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%.4g</text>",
		     L, W - R, y, y, L - 4, y + 4, ymax * k / 4);
		double x = L + (W - L - R) * k / 4.0;
		bput(&r->b, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%.4g</text>", x, H - B + 16, xmax * k / 4);
	}
	bput(&r->b, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">", (L + W - R) / 2, H - 6);
	besc(&r->b, xl);
	bput(&r->b, "</text><text x=\"12\" y=\"%d\" font-size=\"12\" transform=\"rotate(-90 12 %d)\" text-anchor=\"middle\">", (T + H - B) / 2,
	     (T + H - B) / 2);
	besc(&r->b, yl);
	bput(&r->b, "</text>");
	for (int s = 0; s < ns; s++) {
		const char* c = colors[s % 6];
		bput(&r->b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", c);
		for (int i = 0; i < np[s]; i++)
			bput(&r->b, "%.1f,%.1f ", L + (W - L - R) * series[s][i].x / xmax, T + (H - T - B) * (1 - series[s][i].y / ymax));
		bput(&r->b, "\"/>");
		for (int i = 0; i < np[s]; i++) {
			bput(&r->b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>%.4g at %.4g (receipt %lld)</title></circle>",
			     L + (W - L - R) * series[s][i].x / xmax, T + (H - T - B) * (1 - series[s][i].y / ymax), c, series[s][i].y, series[s][i].x,
			     series[s][i].id);
		}
		bput(&r->b, "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" font-size=\"11\">", L + 8,
		     T + 4 + 14 * s, c, L + 22, T + 13 + 14 * s);
		besc(&r->b, names[s]);
		bput(&r->b, "</text>");
	}
	bput(&r->b, "</svg><figcaption>");
	besc(&r->b, label);
	bput(&r->b, "</figcaption></figure>\n");
}

/* Horizontal bars (value, optional interval) against a reference line at ref (NAN: none). */
static void svg_bars(struct rep* r, const char* label, const char* xl, const struct pt* p, int n, double ref)
{
	const int W = 640, L = 150, R = 16, T = 10, rowh = 24;
	int H = T + rowh * n + 34;
	double xmax = 0;
	for (int i = 0; i < n; i++) {
		double v = isfinite(p[i].hi) ? p[i].hi : p[i].y;
		xmax = v > xmax ? v : xmax;
	}
	if (isfinite(ref) && ref > xmax) xmax = ref;
	xmax = nice_max(xmax * 1.05);
	bput(&r->b, "<figure><svg role=\"img\" aria-label=\"");
	besc(&r->b, label);
	bput(&r->b, "\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\"><title>", W, H, W, H);
	besc(&r->b, label);
	bput(&r->b, "</title><rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>", W, H);
	for (int k = 0; k <= 4; k++) {
		double x = L + (W - L - R) * k / 4.0;
		bput(&r->b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#eee\"/><text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%.4g</text>",
		     x, x, T, T + rowh * n, x, T + rowh * n + 14, xmax * k / 4);
	}
	for (int i = 0; i < n; i++) {
		double y = T + rowh * i;
		double w = (W - L - R) * p[i].y / xmax;
		bput(&r->b, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">", L - 6, y + 16);
		besc(&r->b, p[i].label);
		bput(&r->b, "</text><rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"#4c78a8\"><title>%.4g (receipt %lld)</title></rect>", L,
		     y + 5, w > 0 ? w : 0, rowh - 8, p[i].y, p[i].id);
		if (isfinite(p[i].lo) && isfinite(p[i].hi))
			bput(&r->b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" stroke-width=\"2\"/>", L + (W - L - R) * p[i].lo / xmax,
			     L + (W - L - R) * p[i].hi / xmax, y + rowh / 2.0, y + rowh / 2.0);
	}
	if (isfinite(ref))
		bput(&r->b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#d62728\" stroke-dasharray=\"4 3\"/>", L + (W - L - R) * ref / xmax,
		     L + (W - L - R) * ref / xmax, T, T + rowh * n);
	bput(&r->b, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">", (L + W - R) / 2, H - 4);
	besc(&r->b, xl);
	bput(&r->b, "</text></svg><figcaption>");
	besc(&r->b, label);
	bput(&r->b, "</figcaption></figure>\n");
}

/* ---- sections ---------------------------------------------------------------------------------- */

/* The receipts of the runs a promotion court made (its ABBA blocks and warm-ups), id -> true:
 * they are shown through their court, not as headline figures. */
static json_t* court_runs(ev_store* st)
{
	json_t* set = json_object();
	json_t* v = ev_store_verdicts(st, NULL, 0);
	size_t i, k;
	json_t *x, *e;
	json_array_foreach(v, i, x)
	{
		char id[32];
		json_array_foreach(json_object_get(x, "receipts"), k, e)
		{
			snprintf(id, sizeof id, "%lld", (long long)json_integer_value(json_object_get(e, "id")));
			if (!strcmp(sor(sget(x, "court"), ""), "ab")) json_object_set_new(set, id, json_true());
		}
		json_array_foreach(json_object_get(x, "warmup"), k, e)
		{
			snprintf(id, sizeof id, "%lld", (long long)json_integer_value(e));
			json_object_set_new(set, id, json_true());
		}
		json_array_foreach(json_object_get(x, "exactness_receipts"), k, e)
		{
			snprintf(id, sizeof id, "%lld", (long long)json_integer_value(e));
			json_object_set_new(set, id, json_true());
		}
	}
	json_decref(v);
	return set;
}

static void section_figures(struct rep* r, ev_store* st)
{
	json_t* all = ev_store_receipts(st, NULL, 0);
	json_t* skip = court_runs(st);
	bput(&r->b, "<h2 id=\"figures\">Headline figures (measured here)</h2>\n"
	            "<p>Each figure with its scope and the receipt that holds its samples, identity and host state; newest first.</p>\n"
	            "<div class=\"t\"><table><thead><tr><th>run</th><th>figure</th><th>value</th><th>unit</th><th>scope</th><th>receipt</th></tr></thead><tbody>\n");
	size_t i;
	json_t* rec;
	int rows = 0;
	json_array_foreach(all, i, rec)
	{
		const char* kind = sor(sget(rec, "kind"), "");
		char idk[32];
		snprintf(idk, sizeof idk, "%lld", (long long)json_integer_value(json_object_get(rec, "id")));
		if (json_is_true(json_object_get(rec, "imported")) || !strcmp(kind, "court.ab") || json_object_get(skip, idk) || rows >= 80) continue;
		char what[600];
		conditions(what, sizeof what, rec);
		char run[700];
		snprintf(run, sizeof run, "%s: %s", kind, what);
		size_t k;
		json_t* f;
		json_array_foreach(json_object_get(rec, "figures"), k, f)
		{
			fig_row(r, rec, f, run);
			rows++;
		}
	}
	if (!rows) bput(&r->b, "<tr><td colspan=\"6\">no measured receipt in the ledger</td></tr>\n");
	bput(&r->b, "</tbody></table></div>\n");
	if (json_object_size(skip))
		bput(&r->b, "<p>The %zu runs the promotion courts made are shown through their courts' receipts below.</p>\n", json_object_size(skip));
	json_decref(skip);
	json_decref(all);
}

static void section_verdicts(struct rep* r, ev_store* st)
{
	json_t* v = ev_store_verdicts(st, NULL, 0);
	bput(&r->b, "<h2 id=\"courts\">Promotion court verdicts</h2>\n"
	            "<p>A/B in ABBA blocks; the ratio is B/A of the named figure with its 95&#160;%% interval over clean blocks. "
	            "<em>invalid</em>: a veto held, and no verdict is given.</p>\n"
	            "<div class=\"t\"><table><thead><tr><th>verdict</th><th>arms</th><th>figure</th><th>B/A</th><th>95%% interval</th><th>blocks</th><th>vetoes</th><th>crystal</th><th>receipt</th></tr></thead><tbody>\n");
	struct pt bars[32];
	int nb = 0, rows = 0;
	size_t i;
	json_t* x;
	json_array_foreach(v, i, x)
	{
		if (strcmp(sor(sget(x, "court"), ""), "ab")) continue;
		json_t* rec = json_is_integer(json_object_get(x, "receipt")) ? ev_store_get_receipt(st, json_integer_value(json_object_get(x, "receipt"))) : NULL;
		const char* vd = sor(sget(x, "verdict"), "?");
		bput(&r->b, "<tr%s><td><strong>%s</strong></td><td>A: <code>", rec && isfinite(fig_value(rec, "ratio", NULL, NULL)) ? "" : "", vd);
		besc(&r->b, sget(x, "a"));
		bput(&r->b, "</code><br>B: <code>");
		besc(&r->b, sget(x, "b"));
		bput(&r->b, "</code></td><td>");
		besc(&r->b, sget(x, "figure"));
		double ratio = json_number_value(json_object_get(x, "ratio")), lo = json_number_value(json_object_get(x, "lo")),
		       hi = json_number_value(json_object_get(x, "hi"));
		if (json_is_number(json_object_get(x, "lo")) && ratio > 0) bput(&r->b, "</td><td class=\"n\">%.4f</td><td class=\"n\">[%.4f, %.4f]</td>", ratio, lo, hi);
		else bput(&r->b, "</td><td>-</td><td>-</td>");
		bput(&r->b, "<td class=\"n\">%lld of %lld clean</td><td>", (long long)json_integer_value(json_object_get(x, "clean_blocks")),
		     (long long)json_integer_value(json_object_get(x, "blocks")));
		size_t k;
		json_t* vt;
		json_array_foreach(json_object_get(x, "vetoes"), k, vt)
		{
			bput(&r->b, "%s<strong>", k ? "<br>" : "");
			besc(&r->b, sget(vt, "rule"));
			bput(&r->b, "</strong>: ");
			besc(&r->b, sget(vt, "detail"));
		}
		if (!json_array_size(json_object_get(x, "vetoes"))) bput(&r->b, "none");
		/* a verdict judged under limits other than the defaults says which */
		const json_t* lim = json_object_get(x, "limits");
		double ml = json_number_value(json_object_get(lim, "max_load_per_core")), mf = json_number_value(json_object_get(lim, "max_foreign_share"));
		if (lim && (fabs(ml - 0.75) > 1e-9 || fabs(mf - 0.10) > 1e-9))
			bput(&r->b, "<br><em>judged with raised host limits: load %.2f per core, foreign CPU %.0f%%</em>", ml, 100 * mf);
		bput(&r->b, "</td><td>");
		besc(&r->b, sor(sget(x, "crystal"), "-"));
		bput(&r->b, "</td><td>");
		if (rec) receipt_link(r, rec);
		else bput(&r->b, "-");
		bput(&r->b, "</td></tr>\n");
		/* the ratio as a figure of the court's receipt, for the gate */
		if (rec) {
			size_t q;
			json_t* f;
			json_array_foreach(json_object_get(rec, "figures"), q, f)
			{
				bput(&r->b, "<tr class=\"fig sub\" data-receipt=\"%lld\" data-figure=\"", (long long)json_integer_value(json_object_get(rec, "id")));
				besc(&r->b, sget(f, "name"));
				bput(&r->b, "\" data-scope=\"%s\" data-value=\"%.17g\" data-sha256=\"%s\"><td colspan=\"9\">figure ", sget(f, "scope"),
				     json_number_value(json_object_get(f, "value")), sor(sget(rec, "sha256"), ""));
				besc(&r->b, sget(f, "name"));
				bput(&r->b, " = %.4f ", json_number_value(json_object_get(f, "value")));
				besc(&r->b, sget(f, "unit"));
				bput(&r->b, " <span class=\"sc\">%s</span> ", sget(f, "scope"));
				receipt_link(r, rec);
				bput(&r->b, "</td></tr>\n");
			}
		}
		if (rec && nb < 32 && ratio > 0 && json_is_number(json_object_get(x, "lo"))) {
			bars[nb] = (struct pt){ .y = ratio, .lo = lo, .hi = hi, .id = (long long)json_integer_value(json_object_get(rec, "id")) };
			snprintf(bars[nb].label, sizeof bars[nb].label, "verdict %lld: %s", (long long)json_integer_value(json_object_get(x, "id")), vd);
			nb++;
		}
		json_decref(rec);
		rows++;
	}
	if (!rows) bput(&r->b, "<tr><td colspan=\"9\">no promotion court has run</td></tr>\n");
	bput(&r->b, "</tbody></table></div>\n");
	if (nb) svg_bars(r, "Promotion courts: B/A with its 95 % interval (dashed: no change)", "ratio B/A", bars, nb, 1.0);
	json_decref(v);
}

static void section_exactness(struct rep* r, ev_store* st)
{
	json_t* a = ev_store_receipts(st, "court.spec", 80);
	bput(&r->b, "<h2 id=\"exactness\">Exactness courts</h2>\n<p>Each case decoded plainly and speculatively; the tokens must be "
	            "identical bit for bit.</p>\n<div class=\"t\"><table><thead><tr><th>verdict</th><th>model</th><th>draft</th><th>exact cases</th>"
	            "<th>drafted</th><th>accepted</th><th>rollbacks</th><th>receipt</th></tr></thead><tbody>\n");
	size_t i;
	json_t* rec;
	json_t* hist = NULL;
	long long hist_id = 0;
	json_array_foreach(a, i, rec)
	{
		const json_t* c = json_object_get(rec, "counts");
		char cond[600];
		conditions(cond, sizeof cond, rec);
		bput(&r->b, "<tr><td><strong>");
		besc(&r->b, sor(sget(json_object_get(rec, "extra"), "verdict"), sget(rec, "status")));
		bput(&r->b, "</strong></td><td>");
		besc(&r->b, cond);
		if (json_is_true(json_object_get(rec, "imported")))
			bput(&r->b, " <em>(imported: %s)</em>", strrchr(sor(sget(json_object_get(rec, "source"), "file"), "?"), '/')
			                                          ? strrchr(sget(json_object_get(rec, "source"), "file"), '/') + 1
			                                          : sor(sget(json_object_get(rec, "source"), "file"), "?"));
		bput(&r->b, "</td><td>");
		besc(&r->b, sor(sget(json_object_get(rec, "args"), "draft"), "-"));
		const json_t* f = NULL;
		size_t q;
		json_t* x;
		json_array_foreach(json_object_get(rec, "figures"), q, x) if (!strcmp(sor(sget(x, "name"), ""), "exact_cases")) f = x;
		bput(&r->b, "</td><td class=\"n\">%g of %lld</td><td class=\"n\">%lld</td><td class=\"n\">%lld</td><td class=\"n\">%lld</td><td>",
		     f ? json_number_value(json_object_get(f, "value")) : 0.0, f ? (long long)json_integer_value(json_object_get(f, "n")) : 0LL,
		     (long long)json_integer_value(json_object_get(c, "drafted")), (long long)json_integer_value(json_object_get(c, "accepted")),
		     (long long)json_integer_value(json_object_get(c, "rollbacks")));
		receipt_link(r, rec);
		bput(&r->b, "</td></tr>\n");
		if (!hist && json_is_array(json_object_get(json_object_get(rec, "extra"), "accepted_len"))) {
			hist = json_object_get(json_object_get(rec, "extra"), "accepted_len");
			hist_id = (long long)json_integer_value(json_object_get(rec, "id"));
		}
	}
	if (!json_array_size(a)) bput(&r->b, "<tr><td colspan=\"8\">no exactness court has run</td></tr>\n");
	bput(&r->b, "</tbody></table></div>\n");
	if (hist) {
		struct pt p[17];
		int n = 0;
		for (size_t k = 0; k < json_array_size(hist) && k < 17; k++) {
			p[n] = (struct pt){ .y = (double)json_integer_value(json_array_get(hist, k)), .lo = NAN, .hi = NAN, .id = hist_id };
			snprintf(p[n].label, sizeof p[n].label, "%zu accepted", k);
			n++;
		}
		while (n > 1 && p[n - 1].y == 0) n--;
		char label[128];
		snprintf(label, sizeof label, "Acceptance histogram: verify steps by drafts accepted (receipt %lld)", hist_id);
		svg_bars(r, label, "verify steps", p, n, NAN);
	}
	json_decref(a);
}

/* tok/s against context depth, per (model, backend, threads) series of bench receipts */
static void plot_depth(struct rep* r, json_t* benches)
{
	char names[32][96];
	const char* np_[32];
	struct pt* series[32];
	int np[32], ns = 0;
	size_t i;
	json_t* rec;
	json_array_foreach(benches, i, rec)
	{
		double tg = fig_value(rec, "tg", NULL, NULL);
		if (!isfinite(tg)) continue;
		const json_t* rt = json_object_get(rec, "runtime");
		const json_t* m = json_object_get(rec, "model");
		const char* path = sor(sget(m, "path"), "?");
		const char* base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
		/* one series per model, backend, threads and the switches set on the command line */
		const char* kn = sget(json_object_get(rec, "args"), "knobs");
		char key[96];
		snprintf(key, sizeof key, "%.40s %s x%lld%s%.30s%s", base, sor(sget(rt, "backend"), "?"), (long long)json_integer_value(json_object_get(rt, "threads")),
		         kn ? " " : "", kn ? kn : "", json_is_true(json_object_get(rec, "imported")) ? " (imported)" : "");
		int s = 0;
		while (s < ns && strcmp(names[s], key)) s++;
		if (s == ns) {
			if (ns == 32) continue;
			snprintf(names[ns], sizeof names[0], "%s", key);
			np_[ns] = names[ns];
			series[ns] = calloc(64, sizeof(struct pt));
			np[ns++] = 0;
		}
		if (np[s] >= 64) continue;
		double d = (double)json_integer_value(json_object_get(json_object_get(rec, "workload"), "depth"));
		/* one point per depth: the newest */
		int dup = 0;
		for (int k = 0; k < np[s]; k++) dup |= series[s][k].x == d;
		if (dup) continue;
		series[s][np[s]++] = (struct pt){ .x = d, .y = tg, .id = (long long)json_integer_value(json_object_get(rec, "id")) };
	}
	/* only series that sweep the depth */
	int keep = 0;
	for (int s = 0; s < ns; s++) {
		for (int a = 1; a < np[s]; a++)
			for (int b = a; b > 0 && series[s][b].x < series[s][b - 1].x; b--) {
				struct pt t = series[s][b];
				series[s][b] = series[s][b - 1];
				series[s][b - 1] = t;
			}
		if (np[s] >= 2 && keep < 6) { /* at most six lines: a plot people can read */
			series[keep] = series[s];
			np[keep] = np[s];
			if (keep != s) memcpy(names[keep], names[s], sizeof names[0]);
			np_[keep] = names[keep];
			keep++;
		} else free(series[s]);
	}
	if (keep) svg_lines(r, "Decode tok/s against context depth (tg, decode-only)", "context depth (tokens)", "tok/s", series, np, np_, keep);
	else bput(&r->b, "<p>No depth sweep in the ledger yet (bench --depth N at two or more depths).</p>\n");
	for (int s = 0; s < keep; s++) free(series[s]);
}

static void section_structure(struct rep* r, ev_store* st)
{
	json_t* a = ev_store_receipts(st, "bench", 0);
	bput(&r->b, "<h2 id=\"structure\">Structure per decode token and speed by context</h2>\n<p>Kernel launches, graph launches, host "
	            "synchronisations and host-device crossings per decoded token, from the session counters.</p>\n"
	            "<div class=\"t\"><table><thead><tr><th>run</th><th>kernels</th><th>graph launches</th><th>syncs</th><th>crossings</th><th>receipt</th></tr></thead><tbody>\n");
	size_t i;
	json_t* rec;
	int rows = 0;
	json_t* skip = court_runs(st);
	json_array_foreach(a, i, rec)
	{
		const json_t* c = json_object_get(rec, "counts");
		char idk[32];
		snprintf(idk, sizeof idk, "%lld", (long long)json_integer_value(json_object_get(rec, "id")));
		if (json_object_get(skip, idk)) continue;
		if (!json_object_get(c, "kernels_per_token") && !json_object_get(c, "syncs_per_token")) continue;
		if (rows >= 30) break;
		char cond[600];
		conditions(cond, sizeof cond, rec);
		bput(&r->b, "<tr><td>");
		besc(&r->b, cond);
		bput(&r->b, "%s</td>", json_is_true(json_object_get(rec, "imported")) ? " <em>(imported)</em>" : "");
		const char* keys[] = { "kernels_per_token", "launches_per_token", "syncs_per_token", "crossings_per_token" };
		for (int k = 0; k < 4; k++) {
			const json_t* v = json_object_get(c, keys[k]);
			if (json_is_number(v)) bput(&r->b, "<td class=\"n\">%.4g</td>", json_number_value(v));
			else bput(&r->b, "<td>-</td>");
		}
		bput(&r->b, "<td>");
		receipt_link(r, rec);
		bput(&r->b, "</td></tr>\n");
		rows++;
	}
	bput(&r->b, "</tbody></table></div>\n");
	/* the depth plot leaves the courts' runs out too */
	json_t* kept = json_array();
	json_array_foreach(a, i, rec)
	{
		char idk[32];
		snprintf(idk, sizeof idk, "%lld", (long long)json_integer_value(json_object_get(rec, "id")));
		if (!json_object_get(skip, idk)) json_array_append(kept, rec);
	}
	plot_depth(r, kept);
	json_decref(kept);
	json_decref(skip);
	json_decref(a);
}

static void section_classes(struct rep* r, ev_store* st)
{
	bput(&r->b, "<h2 id=\"classes\">Speed by prompt class</h2>\n");
	const char* kinds[] = { "bench.workload", "bench.spec" };
	int shown = 0;
	for (int k = 0; k < 2; k++) {
		json_t* a = ev_store_receipts(st, kinds[k], 1);
		json_t* rec = json_array_get(a, 0);
		if (rec) {
			struct pt p[32];
			int n = 0, speed = 0;
			size_t i;
			json_t* f;
			/* speedups when a drafter ran, else end-to-end tok/s */
			json_array_foreach(json_object_get(rec, "figures"), i, f) speed |= strstr(sor(sget(f, "name"), ""), ".speedup_e2e") != NULL;
			json_array_foreach(json_object_get(rec, "figures"), i, f)
			{
				const char* nm = sor(sget(f, "name"), "");
				const char* dot = strrchr(nm, '.');
				if (!dot || strcmp(dot + 1, speed ? "speedup_e2e" : "e2e") || n >= 32) continue;
				p[n] = (struct pt){ .y = json_number_value(json_object_get(f, "value")), .lo = NAN, .hi = NAN,
					            .id = (long long)json_integer_value(json_object_get(rec, "id")) };
				snprintf(p[n].label, sizeof p[n].label, "%.*s", (int)(dot - nm) < 40 ? (int)(dot - nm) : 40, nm);
				n++;
			}
			if (n) {
				char label[200];
				snprintf(label, sizeof label, "%s per class, end-to-end (receipt %lld, %s)", speed ? "Speedup of speculation" : "Tokens per second",
				         (long long)json_integer_value(json_object_get(rec, "id")), kinds[k]);
				svg_bars(r, label, speed ? "speedup spec/plain (end-to-end)" : "tok/s (end-to-end)", p, n, speed ? 1.0 : NAN);
				cite(r, rec);
				shown++;
			}
		}
		json_decref(a);
	}
	if (!shown) bput(&r->b, "<p>No per-class run in the ledger yet.</p>\n");
}

static void section_imported(struct rep* r, ev_store* st)
{
	json_t* a = ev_store_receipts(st, "bench", 0);
	bput(&r->b, "<h2 id=\"imported\">Rows imported from docs/results</h2>\n<p><em>Imported</em>: copied from the committed JSON lines "
	            "and tables of earlier sessions (the H200's, and the CPU tables without JSON lines), not measured by this ledger; each "
	            "receipt names its source file, that file's sha256 and line.</p>\n"
	            "<div class=\"t\"><table><thead><tr><th>run</th><th>figure</th><th>value</th><th>unit</th><th>scope</th><th>receipt</th></tr></thead><tbody>\n");
	size_t i;
	json_t* rec;
	int rows = 0;
	json_array_foreach(a, i, rec)
	{
		if (!json_is_true(json_object_get(rec, "imported")) || rows >= 400) continue; /* every imported row: the page is their index */
		char cond[600], what[900];
		conditions(cond, sizeof cond, rec);
		const json_t* src = json_object_get(rec, "source");
		const char* file = sor(sget(src, "file"), "?");
		snprintf(what, sizeof what, "%s [%s:%lld, commit %s]", cond, strrchr(file, '/') ? strrchr(file, '/') + 1 : file,
		         (long long)json_integer_value(json_object_get(src, "line")), sor(sget(json_object_get(rec, "runtime"), "commit"), "?"));
		size_t k;
		json_t* f;
		json_array_foreach(json_object_get(rec, "figures"), k, f)
		{
			if (strcmp(sor(sget(f, "name"), ""), "tg")) continue;
			fig_row(r, rec, f, what);
			rows++;
		}
	}
	if (!rows) bput(&r->b, "<tr><td colspan=\"6\">nothing imported</td></tr>\n");
	bput(&r->b, "</tbody></table></div>\n");
	json_decref(a);
}

/* ==== The mechanisms: CPU | CUDA | paper ======================================================= */

/* The paper's four families of mechanisms, each measured on this machine's CPU and on the H200
 * beside the paper's Apple figure. The table's rows, the selectors that pick each cell's receipts
 * and the rules that turn a cell's figures into a verdict are data (docs/results/mechanisms.json):
 * a receipt appended to the ledger that a selector matches shows up on the next build, and a cell
 * no receipt matches says "not measured" instead of going blank. */

static const char* const mech_verdicts[] = { "TRANSFERS", "HW-GAP", "RUNTIME", "N/A", "not measured" };
static const char* const mech_cols[] = { "cpu", "cuda" };

static int verdict_ok(const char* v)
{
	for (size_t i = 0; v && i < sizeof mech_verdicts / sizeof mech_verdicts[0]; i++)
		if (!strcmp(v, mech_verdicts[i])) return 1;
	return 0;
}

/* a document's value at a slash-separated path ("runtime/knobs/cuda.att_split": knob names hold dots) */
static const json_t* at_path(const json_t* o, const char* path)
{
	char key[256];
	while (o && path && *path) {
		const char* sl = strchr(path, '/');
		size_t n = sl ? (size_t)(sl - path) : strlen(path);
		if (n >= sizeof key) return NULL;
		memcpy(key, path, n);
		key[n] = 0;
		o = json_object_get(o, key);
		path += n + (sl ? 1 : 0);
	}
	return o;
}

static int same_value(const json_t* have, const json_t* want)
{
	if (!have) return 0;
	if (json_is_number(have) && json_is_number(want)) return json_number_value(have) == json_number_value(want);
	return json_equal(have, want);
}

/* have (a string) contains want, or one of want's strings (alternatives) */
static int contains(const json_t* have, const json_t* want)
{
	const char* s = json_string_value(have);
	if (!s) return 0;
	if (json_is_string(want)) return strstr(s, json_string_value(want)) != NULL;
	size_t i;
	json_t* w;
	json_array_foreach(want, i, w) if (json_is_string(w) && strstr(s, json_string_value(w))) return 1;
	return 0;
}

/* A selector: {"kind", "figure", "match": {path: value}, "like": {path: text or [texts]},
 * "unless": {path: value}}; it picks a receipt that has the figure and meets every condition. */
static int sel_matches(const json_t* rec, const json_t* sel)
{
	const char* kind = sget(sel, "kind");
	if (kind && strcmp(kind, sor(sget(rec, "kind"), ""))) return 0;
	const char* k;
	json_t* v;
	json_object_foreach((json_t*)json_object_get(sel, "match"), k, v) if (!same_value(at_path(rec, k), v)) return 0;
	json_object_foreach((json_t*)json_object_get(sel, "like"), k, v) if (!contains(at_path(rec, k), v)) return 0;
	json_object_foreach((json_t*)json_object_get(sel, "unless"), k, v) if (same_value(at_path(rec, k), v)) return 0;
	if (sget(sel, "field")) return json_is_number(at_path(rec, sget(sel, "field")));
	return isfinite(fig_value(rec, sor(sget(sel, "figure"), ""), NULL, NULL));
}

/* the value sel names in rec: a figure, or a numeric field ("extra/gpu_weights_mib") */
static double sel_value(const json_t* rec, const json_t* sel)
{
	if (sget(sel, "field")) return json_number_value(at_path(rec, sget(sel, "field")));
	return fig_value(rec, sor(sget(sel, "figure"), ""), NULL, NULL);
}

/* the newest receipt sel picks (all: newest first), NULL when none does */
static const json_t* sel_pick(const json_t* all, const json_t* sel)
{
	if (!json_is_object(sel)) return NULL;
	size_t i;
	json_t* rec;
	json_array_foreach(all, i, rec) if (sel_matches(rec, sel)) return rec;
	return NULL;
}

/* The verdict of a measured cell: the first rule whose input is known and inside [min, max).
 * Inputs: "value" (the main figure), "effect" (main / base: the mechanism on against off),
 * "peer" (main / peer: against llama.cpp); a rule without "on" always applies. */
static const json_t* mech_rule(const json_t* cell, double value, double effect, double peer)
{
	size_t i;
	json_t* r;
	json_array_foreach(json_object_get(cell, "rules"), i, r)
	{
		const char* on = sget(r, "on");
		double x = !on ? 0 : !strcmp(on, "value") ? value : !strcmp(on, "effect") ? effect : !strcmp(on, "peer") ? peer : NAN;
		if (on && !isfinite(x)) continue;
		const json_t* lo = json_object_get(r, "min");
		const json_t* hi = json_object_get(r, "max");
		if (json_is_number(lo) && !(x >= json_number_value(lo))) continue;
		if (json_is_number(hi) && !(x < json_number_value(hi))) continue;
		return r;
	}
	return NULL;
}

/* what a cell says when its main selector picks nothing */
static void mech_missing(const json_t* cell, const char** verdict, const char** why)
{
	const json_t* m = json_object_get(cell, "missing");
	*verdict = sor(sget(m, "verdict"), "not measured");
	*why = sor(sget(m, "why"), "no receipt in the ledger matches this cell's selector yet");
}

static int sel_check(const json_t* sel, const char* where, char* err, size_t errlen)
{
	if (!json_is_object(sel) || !sget(sel, "figure") == !sget(sel, "field") || (sget(sel, "field") && !sget(sel, "unit"))) {
		snprintf(err, errlen, "%s: a selector needs an object with \"figure\", or \"field\" and \"unit\"", where);
		return -1;
	}
	const char* keys[] = { "match", "like", "unless" };
	for (int k = 0; k < 3; k++) {
		const json_t* o = json_object_get(sel, keys[k]);
		if (o && !json_is_object(o)) {
			snprintf(err, errlen, "%s: \"%s\" must be an object of path -> value", where, keys[k]);
			return -1;
		}
	}
	return 0;
}

int ev_mech_check(const json_t* spec, char* err, size_t errlen)
{
	const json_t* ms = json_object_get(spec, "mechanisms");
	if (!json_is_array(ms) || !json_array_size(ms)) {
		snprintf(err, errlen, "no \"mechanisms\" array");
		return -1;
	}
	size_t i;
	json_t* m;
	json_array_foreach(ms, i, m)
	{
		char where[160];
		const char* id = sget(m, "id");
		if (!id || !sget(m, "family") || !sget(m, "name")) {
			snprintf(err, errlen, "mechanism %zu: needs \"id\", \"family\" and \"name\"", i);
			return -1;
		}
		for (size_t j = 0; j < i; j++)
			if (!strcmp(id, sor(sget(json_array_get(ms, j), "id"), ""))) {
				snprintf(err, errlen, "mechanism %s appears twice", id);
				return -1;
			}
		for (int c = 0; c < 2; c++) {
			const json_t* cell = json_object_get(m, mech_cols[c]);
			snprintf(where, sizeof where, "%s/%s", id, mech_cols[c]);
			if (!json_is_object(cell)) {
				snprintf(err, errlen, "%s: missing (a column without a measurement says so in \"missing\")", where);
				return -1;
			}
			const json_t* mv = json_object_get(cell, "missing");
			if (mv && (!verdict_ok(sget(mv, "verdict")) || !sget(mv, "why"))) {
				snprintf(err, errlen, "%s: \"missing\" needs a verdict (%s) and a why", where, "TRANSFERS, HW-GAP, RUNTIME, N/A, not measured");
				return -1;
			}
			if (!json_object_get(cell, "main")) continue;
			if (sel_check(json_object_get(cell, "main"), where, err, errlen)) return -1;
			if (json_object_get(cell, "base") && sel_check(json_object_get(cell, "base"), where, err, errlen)) return -1;
			if (json_object_get(cell, "peer") && sel_check(json_object_get(cell, "peer"), where, err, errlen)) return -1;
			size_t k;
			json_t* x;
			json_array_foreach(json_object_get(cell, "also"), k, x)
			{
				if (!sget(x, "label")) {
					snprintf(err, errlen, "%s: an \"also\" figure needs a label", where);
					return -1;
				}
				if (sel_check(x, where, err, errlen)) return -1;
			}
			const json_t* rules = json_object_get(cell, "rules");
			size_t nr = json_array_size(rules);
			if (!nr || sget(json_array_get(rules, nr - 1), "on")) {
				snprintf(err, errlen, "%s: \"rules\" must end with a rule without \"on\" (every measured cell gets a verdict)", where);
				return -1;
			}
			json_array_foreach(rules, k, x)
			{
				const char* on = sget(x, "on");
				if (!verdict_ok(sget(x, "verdict")) || !sget(x, "why") ||
				    (on && strcmp(on, "value") && strcmp(on, "effect") && strcmp(on, "peer"))) {
					snprintf(err, errlen, "%s: rule %zu needs a verdict (TRANSFERS, HW-GAP, RUNTIME, N/A, not measured), a why, and on value|effect|peer", where, k);
					return -1;
				}
			}
		}
		const json_t* p = json_object_get(m, "paper");
		if (!json_is_object(p) || !(json_is_number(json_object_get(p, "value")) || sget(p, "why"))) {
			snprintf(err, errlen, "%s/paper: a value with \"unit\" and \"cite\", or a \"why\" it is absent", id);
			return -1;
		}
		if (json_is_number(json_object_get(p, "value")) && (!sget(p, "unit") || !sget(p, "cite") || (sget(p, "verdict") && !verdict_ok(sget(p, "verdict"))))) {
			snprintf(err, errlen, "%s/paper: a value needs \"unit\" and \"cite\" (and a verdict from the list, if any)", id);
			return -1;
		}
	}
	return 0;
}

/* one figure of a cell as a checked element: the gate ties it to its receipt */
static void mech_fig(struct rep* r, const json_t* rec, const json_t* sel, const char* role)
{
	if (sget(sel, "field")) {
		/* a number the receipt holds outside its figures (a memory size): tied to it by path */
		double v = sel_value(rec, sel);
		bput(&r->b, "<span class=\"fld\" data-role=\"%s\" data-receipt=\"%lld\" data-field=\"", role,
		     (long long)json_integer_value(json_object_get(rec, "id")));
		besc(&r->b, sget(sel, "field"));
		bput(&r->b, "\" data-value=\"%.17g\" data-sha256=\"%s\"><strong>%.4g</strong> ", v, sor(sget(rec, "sha256"), ""), v);
		besc(&r->b, sget(sel, "unit"));
		bput(&r->b, "</span> ");
		receipt_link(r, rec);
		return;
	}
	const char* name = sget(sel, "figure");
	const char *scope = NULL, *unit = NULL;
	double v = fig_value(rec, name, &scope, &unit);
	bput(&r->b, "<span class=\"fig\" data-role=\"%s\" data-receipt=\"%lld\" data-figure=\"", role,
	     (long long)json_integer_value(json_object_get(rec, "id")));
	besc(&r->b, name);
	bput(&r->b, "\" data-scope=\"%s\" data-value=\"%.17g\" data-sha256=\"%s\"><strong>%.4g</strong> ", sor(scope, ""), v,
	     sor(sget(rec, "sha256"), ""), v);
	besc(&r->b, sor(unit, ""));
	bput(&r->b, "</span> <span class=\"sc\">%s</span> ", sor(scope, ""));
	receipt_link(r, rec);
}

static void mech_cond(struct rep* r, const json_t* rec)
{
	char cond[600];
	conditions(cond, sizeof cond, rec);
	bput(&r->b, "<br><small>");
	besc(&r->b, cond);
	const json_t* src = json_object_get(rec, "source");
	if (json_is_true(json_object_get(rec, "imported")) && sget(src, "file")) {
		const char* f = sget(src, "file");
		bput(&r->b, " [");
		besc(&r->b, strrchr(f, '/') ? strrchr(f, '/') + 1 : f);
		bput(&r->b, ":%lld]", (long long)json_integer_value(json_object_get(src, "line")));
	}
	bput(&r->b, "</small>");
}

static void mech_cell(struct rep* r, const json_t* all, const json_t* m, const char* col)
{
	const json_t* cell = json_object_get(m, col);
	const json_t* main_sel = json_object_get(cell, "main");
	const json_t* rec = sel_pick(all, main_sel);
	const char *verdict, *why;
	double value = NAN, effect = NAN, peer = NAN;
	const json_t *base = NULL, *pr = NULL;
	if (rec) {
		value = sel_value(rec, main_sel);
		base = sel_pick(all, json_object_get(cell, "base"));
		pr = sel_pick(all, json_object_get(cell, "peer"));
		if (base) effect = value / sel_value(base, json_object_get(cell, "base"));
		if (pr) peer = value / sel_value(pr, json_object_get(cell, "peer"));
		const json_t* rule = mech_rule(cell, value, effect, peer);
		verdict = sor(sget(rule, "verdict"), "not measured");
		why = sor(sget(rule, "why"), "no rule applies");
	} else mech_missing(cell, &verdict, &why);
	bput(&r->b, "<td class=\"mc\" data-mech=\"");
	besc(&r->b, sget(m, "id"));
	bput(&r->b, "\" data-col=\"%s\" data-verdict=\"%s\"", col, verdict);
	if (isfinite(effect)) bput(&r->b, " data-effect=\"%.17g\"", effect);
	if (isfinite(peer)) bput(&r->b, " data-peer=\"%.17g\"", peer);
	bput(&r->b, ">");
	if (!rec) bput(&r->b, "<em class=\"nm\">not measured</em>");
	else {
		mech_fig(r, rec, main_sel, "main");
		mech_cond(r, rec);
		if (base) {
			bput(&r->b, "<br>effect <strong>&#215;%.3g</strong> against ", effect);
			besc(&r->b, sor(sget(json_object_get(cell, "base"), "label"), "the mechanism off"));
			bput(&r->b, ": ");
			mech_fig(r, base, json_object_get(cell, "base"), "base");
		} else if (json_object_get(cell, "base")) {
			bput(&r->b, "<br>effect: <em class=\"nm\">not measured</em> (no receipt for ");
			besc(&r->b, sor(sget(json_object_get(cell, "base"), "label"), "the mechanism off"));
			bput(&r->b, ")");
		}
		if (pr) {
			bput(&r->b, "<br>peer <strong>&#215;%.3g</strong> against llama.cpp: ", peer);
			mech_fig(r, pr, json_object_get(cell, "peer"), "peer");
		} else if (json_object_get(cell, "peer")) bput(&r->b, "<br>peer: <em class=\"nm\">not measured</em> (no llama.cpp receipt under these conditions)");
		size_t k;
		json_t* x;
		json_array_foreach(json_object_get(cell, "also"), k, x)
		{
			const json_t* xr = sel_pick(all, x);
			bput(&r->b, "<br>");
			besc(&r->b, sget(x, "label"));
			bput(&r->b, ": ");
			if (xr) mech_fig(r, xr, x, "also");
			else bput(&r->b, "<em class=\"nm\">not measured</em>");
		}
	}
	bput(&r->b, "<br><strong class=\"vd\">%s</strong>: ", verdict);
	besc(&r->b, why);
	bput(&r->b, "</td>");
}

static void mech_paper(struct rep* r, const json_t* m)
{
	const json_t* p = json_object_get(m, "paper");
	const json_t* v = json_object_get(p, "value");
	bput(&r->b, "<td class=\"mc\" data-mech=\"");
	besc(&r->b, sget(m, "id"));
	bput(&r->b, "\" data-col=\"paper\" data-verdict=\"%s\"", sor(sget(p, "verdict"), "not measured"));
	if (json_is_number(v)) {
		bput(&r->b, " data-value=\"%.17g\"><strong>%.4g</strong> ", json_number_value(v), json_number_value(v));
		besc(&r->b, sget(p, "unit"));
		bput(&r->b, "<br><small>");
		besc(&r->b, sget(p, "cite"));
		bput(&r->b, "</small>");
	} else bput(&r->b, "><em class=\"nm\">not in the repository</em>");
	bput(&r->b, "<br><strong class=\"vd\">%s</strong>", sor(sget(p, "verdict"), "not measured"));
	if (sget(p, "why")) {
		bput(&r->b, ": ");
		besc(&r->b, sget(p, "why"));
	}
	bput(&r->b, "</td>");
}

static void section_mechanisms(struct rep* r, ev_store* st, const json_t* spec)
{
	bput(&r->b, "<h2 id=\"mechanisms\">Mechanisms: CPU, CUDA H200 and the paper (Apple)</h2>\n");
	if (!spec) {
		bput(&r->b, "<p>No mechanism table was given (<code>proven report --mechanisms docs/results/mechanisms.json</code>).</p>\n");
		return;
	}
	bput(&r->b, "<p>");
	besc(&r->b, sor(sget(spec, "about"), ""));
	bput(&r->b, " Each cell: the figure its selector picks (the newest receipt that matches), the run's conditions, the "
	            "<em>effect</em> (the mechanism on against off, same conditions) and the <em>peer</em> ratio (against llama.cpp, "
	            "same conditions) where a receipt exists, and the verdict with its reason: <strong>TRANSFERS</strong> (the paper's "
	            "gain holds here), <strong>HW-GAP</strong> (it does not, for a reason of the hardware), <strong>RUNTIME</strong> "
	            "(it does not, for a reason of this runtime), <strong>N/A</strong> (the mechanism does not apply). A cell no receipt "
	            "matches says <em>not measured</em>. The table's selectors and rules: <a href=\"mechanisms.json\">mechanisms.json</a>.</p>\n");
	json_t* all = ev_store_receipts(st, NULL, 0);
	bput(&r->b, "<div class=\"t\"><table class=\"mech\"><thead><tr><th>mechanism</th><th>CPU (this machine)</th><th>CUDA H200</th>"
	            "<th>paper (Apple)</th></tr></thead><tbody>\n");
	const char* fam = NULL;
	size_t i;
	json_t* m;
	json_array_foreach(json_object_get(spec, "mechanisms"), i, m)
	{
		if (!fam || strcmp(fam, sget(m, "family"))) {
			fam = sget(m, "family");
			bput(&r->b, "<tr class=\"fam\"><th colspan=\"4\">");
			besc(&r->b, fam);
			bput(&r->b, "</th></tr>\n");
		}
		bput(&r->b, "<tr class=\"mech\"><td><strong>");
		besc(&r->b, sget(m, "name"));
		bput(&r->b, "</strong>");
		if (sget(m, "what")) {
			bput(&r->b, "<br><small>");
			besc(&r->b, sget(m, "what"));
			bput(&r->b, "</small>");
		}
		bput(&r->b, "</td>");
		for (int c = 0; c < 2; c++) mech_cell(r, all, m, mech_cols[c]);
		mech_paper(r, m);
		bput(&r->b, "</tr>\n");
	}
	bput(&r->b, "</tbody></table></div>\n");
	json_decref(all);
}

/* a proof file as a link when it resolves from the report's folder */
static void proof_ref(struct rep* r, const json_t* p)
{
	const char* kind = sor(sget(p, "kind"), "?");
	const char* ref = sor(sget(p, "ref"), "?");
	char path[8192];
	struct stat sb;
	if (!strcmp(kind, "file") && r->root_rel[0]) {
		snprintf(path, sizeof path, "%s/%s%s", r->dir, r->root_rel, ref);
		if (!stat(path, &sb)) {
			bput(&r->b, "<a href=\"");
			besc(&r->b, r->root_rel);
			besc(&r->b, ref);
			bput(&r->b, "\">");
			besc(&r->b, ref);
			bput(&r->b, "</a>");
			return;
		}
	}
	bput(&r->b, "%s <code>", kind);
	besc(&r->b, ref);
	bput(&r->b, "</code>");
}

static void section_crystals(struct rep* r, ev_store* st)
{
	bput(&r->b, "<h2 id=\"crystals\">Crystals</h2>\n<p>Optimisation attempts with their proofs and lessons (docs/ledger/crystals.jsonl). "
	            "Figures here are quoted from the proofs.</p>\n");
	const char* sts[] = { "active", "candidate", "dead" };
	for (int s = 0; s < 3; s++) {
		json_t* a = ev_crystals(st, sts[s]);
		bput(&r->b, "<h3>%s (%zu)</h3>\n", sts[s], json_array_size(a));
		size_t i;
		json_t* c;
		json_array_foreach(a, i, c)
		{
			bput(&r->b, "<details><summary><strong>");
			besc(&r->b, sget(c, "name"));
			bput(&r->b, "</strong>: <code>");
			besc(&r->b, sget(c, "switch"));
			bput(&r->b, "</code></summary><p>");
			besc(&r->b, sget(c, "hypothesis"));
			bput(&r->b, "</p>");
			if (sget(c, "figures")) {
				bput(&r->b, "<p>Measured: ");
				besc(&r->b, sget(c, "figures"));
				bput(&r->b, "</p>");
			}
			size_t k;
			json_t* x;
			bput(&r->b, "<ul>");
			json_array_foreach(json_object_get(c, "proofs"), k, x)
			{
				bput(&r->b, "<li>proof: ");
				proof_ref(r, x);
				if (sget(x, "note")) {
					bput(&r->b, ": ");
					besc(&r->b, sget(x, "note"));
				}
				bput(&r->b, "</li>");
			}
			json_array_foreach(json_object_get(c, "lessons"), k, x)
			{
				bput(&r->b, "<li class=\"lesson\">");
				besc(&r->b, json_string_value(x));
				bput(&r->b, "</li>");
			}
			bput(&r->b, "</ul></details>\n");
		}
		json_decref(a);
	}
}

/* DIR relative to the repository root (the folder holding .git from the current directory up) */
static void root_relative(struct rep* r, const char* dir)
{
	char real_dir[PATH_MAX], root[PATH_MAX], probe[PATH_MAX + 8];
	r->root_rel[0] = 0;
	if (!realpath(dir, real_dir) || !getcwd(root, sizeof root)) return;
	for (;;) {
		snprintf(probe, sizeof probe, "%s/.git", root);
		struct stat sb;
		if (!stat(probe, &sb)) break;
		char* sl = strrchr(root, '/');
		if (!sl || sl == root) return;
		*sl = 0;
	}
	size_t rl = strlen(root);
	if (strncmp(real_dir, root, rl) || (real_dir[rl] != '/' && real_dir[rl] != 0)) return;
	/* one "../" per folder of DIR below the root */
	size_t o = 0;
	for (const char* p = real_dir + rl; *p; p++)
		if (*p == '/' && o + 4 < sizeof r->root_rel) o += (size_t)snprintf(r->root_rel + o, sizeof r->root_rel - o, "../");
	if (!o) snprintf(r->root_rel, sizeof r->root_rel, "./");
}

static int write_file(const char* path, const char* data, size_t n)
{
	FILE* f = fopen(path, "wb");
	if (!f) return -1;
	int bad = fwrite(data, 1, n, f) != n;
	return fclose(f) || bad ? -1 : 0;
}

static char* read_all(const char* path, size_t* n);

int ev_report_write(ev_store* st, const char* dir, const char* title, char* err, size_t errlen)
{
	return ev_report_write_with(st, dir, title, NULL, err, errlen);
}

int ev_report_write_with(ev_store* st, const char* dir, const char* title, const char* mechanisms, char* err, size_t errlen)
{
	char path[8192];
	/* the mechanism table first: a malformed one stops the build before anything is written */
	json_t* spec = NULL;
	char* spec_text = NULL;
	size_t spec_n = 0;
	if (mechanisms) {
		json_error_t je;
		spec_text = read_all(mechanisms, &spec_n);
		spec = spec_text ? json_loadb(spec_text, spec_n, 0, &je) : NULL;
		if (!spec) {
			snprintf(err, errlen, "%s: %s", mechanisms, spec_text ? je.text : "cannot read it");
			free(spec_text);
			return -1;
		}
		char why[400];
		if (ev_mech_check(spec, why, sizeof why)) {
			snprintf(err, errlen, "%s: %s", mechanisms, why);
			json_decref(spec);
			free(spec_text);
			return -1;
		}
	}
	snprintf(path, sizeof path, "%s/receipts", dir);
	if ((mkdir(dir, 0755) && errno != EEXIST) || (mkdir(path, 0755) && errno != EEXIST)) {
		snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
		json_decref(spec);
		free(spec_text);
		return -1;
	}
	/* the gate reads the table's rules from the page's folder: the page and its rules travel together */
	snprintf(path, sizeof path, "%s/mechanisms.json", dir);
	if (spec_text && write_file(path, spec_text, spec_n)) {
		snprintf(err, errlen, "cannot write %s", path);
		json_decref(spec);
		free(spec_text);
		return -1;
	}
	if (!spec_text) unlink(path);
	free(spec_text);
	struct rep r = { .cited = json_object(), .dir = dir };
	root_relative(&r, dir);
	char now[32];
	ev_utc_now(now);
	json_t* all = ev_store_receipts(st, NULL, 0);
	json_t* cr = ev_crystals(st, NULL);
	const char* t = title && title[0] ? title : "proven: the evidence";
	bput(&r.b, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
	           "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
	           "<meta name=\"proven-source-sha256\" content=\"" ZERO64 "\">\n<title>");
	besc(&r.b, t);
	bput(&r.b, "</title>\n<style>\n"
	           "body{margin:0;padding:16px;background:#fff;color:#111;font:15px/1.45 system-ui,-apple-system,sans-serif}\n"
	           "main{max-width:1100px;margin:0 auto}\n"
	           ".t{overflow-x:auto;max-width:100%%}\n"
	           "table{border-collapse:collapse;font-size:13px}\n"
	           "th,td{border-bottom:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}\n"
	           "td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\n"
	           "tr.sub td{color:#555;font-size:12px;border-bottom:1px solid #eee}\n"
	           ".sc{background:#eef;border-radius:3px;padding:0 3px;white-space:nowrap}\n"
	           "code,.h{font-family:ui-monospace,monospace;font-size:12px;overflow-wrap:anywhere}\n"
	           "figure{margin:12px 0}svg{max-width:100%%;height:auto;display:block}\n"
	           "li.lesson{color:#8a1c1c}\n"
	           "table.mech td{min-width:200px}table.mech td:first-child{min-width:150px}tr.fam th{background:#f3f3f3}\n"
	           ".nm{color:#8a1c1c}.vd{white-space:nowrap}small{color:#555}\n"
	           "nav{display:flex;flex-wrap:wrap;gap:4px 12px}nav a{white-space:nowrap}\n"
	           "</style></head><body><main>\n<h1>");
	besc(&r.b, t);
	bput(&r.b, "</h1>\n<p>Built %s from the ledger database: %zu receipts, %zu crystals. Every figure names its <strong>scope</strong> "
	           "(kernel, decode-only, observed, end-to-end, quality, court) and links its receipt; the receipts' sha256 and this page's own "
	           "are listed at the end and checked by <code>proven report --check</code>.</p>\n",
	     now, json_array_size(all), json_array_size(cr));
	bput(&r.b, "<nav><a href=\"#mechanisms\">mechanisms</a> <a href=\"#figures\">figures</a> <a href=\"#courts\">courts</a> <a href=\"#exactness\">exactness</a>"
	           "<a href=\"#structure\">structure</a> <a href=\"#classes\">classes</a> <a href=\"#imported\">imported</a>"
	           "<a href=\"#crystals\">crystals</a> <a href=\"#digests\">digests</a></nav>\n");
	json_decref(all);
	json_decref(cr);
	section_mechanisms(&r, st, spec);
	json_decref(spec);
	section_figures(&r, st);
	section_verdicts(&r, st);
	section_exactness(&r, st);
	section_structure(&r, st);
	section_classes(&r, st);
	section_imported(&r, st);
	section_crystals(&r, st);
	/* the cited receipts: their files and digests */
	bput(&r.b, "<h2 id=\"digests\">Digests</h2>\n<p>sha256 of each cited receipt (its canonical JSON without <code>id</code> and "
	           "<code>sha256</code>). The page's own sha256 is in its <code>proven-source-sha256</code> meta element: the page's bytes "
	           "with that value replaced by 64 zeros.</p>\n<div class=\"t\"><table><thead><tr><th>receipt</th><th>sha256</th></tr></thead><tbody>\n");
	const char* k;
	json_t* rec;
	int rc = 0;
	json_object_foreach(r.cited, k, rec)
	{
		bput(&r.b, "<tr><td><a href=\"receipts/%s.json\">#%s</a></td><td class=\"h\">%s</td></tr>\n", k, k, sor(sget(rec, "sha256"), ""));
		char* s = json_dumps(rec, JSON_SORT_KEYS | JSON_INDENT(1));
		snprintf(path, sizeof path, "%s/receipts/%s.json", dir, k);
		if (!s || write_file(path, s, strlen(s))) {
			snprintf(err, errlen, "cannot write %s", path);
			rc = -1;
		}
		free(s);
	}
	bput(&r.b, "</tbody></table></div>\n</main></body></html>\n");
	if (r.b.oom) {
		snprintf(err, errlen, "out of memory");
		rc = -1;
	}
	if (!rc) {
		char hex[65];
		ev_sha256_hex(r.b.s, r.b.n, hex);
		char* at = strstr(r.b.s, ZERO64);
		memcpy(at, hex, 64);
		snprintf(path, sizeof path, "%s/index.html", dir);
		if (write_file(path, r.b.s, r.b.n)) {
			snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
			rc = -1;
		}
	}
	free(r.b.s);
	json_decref(r.cited);
	return rc;
}

/* ==== The gate ================================================================================== */

static char* read_all(const char* path, size_t* n)
{
	FILE* f = fopen(path, "rb");
	if (!f) return NULL;
	size_t cap = 1 << 16, len = 0;
	char* s = malloc(cap);
	for (size_t k; s && (k = fread(s + len, 1, cap - len - 1, f)) > 0;) {
		len += k;
		if (cap - len < 2) {
			char* ns = realloc(s, cap *= 2);
			if (!ns) {
				free(s);
				s = NULL;
			}
			s = ns;
		}
	}
	fclose(f);
	if (s) s[len] = 0;
	if (n) *n = len;
	return s;
}

/* the value of attribute name="..." inside the tag starting at tag (up to its '>'), into out */
static int attr(const char* tag, const char* name, char* out, size_t n)
{
	const char* end = strchr(tag, '>');
	char pat[64];
	snprintf(pat, sizeof pat, " %s=\"", name);
	const char* p = strstr(tag, pat);
	if (!p || (end && p > end)) return -1;
	p += strlen(pat);
	const char* q = strchr(p, '"');
	if (!q) return -1;
	snprintf(out, n, "%.*s", (int)(q - p), p);
	return 0;
}

static void problem(FILE* f, int* n, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void problem(FILE* f, int* n, const char* fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(f, "report --check: ");
	vfprintf(f, fmt, ap);
	fputc('\n', f);
	va_end(ap);
	(*n)++;
}

/* &amp; and &quot; back (the only entities the writer puts in attributes it checks) */
static void unescape(char* s)
{
	char* o = s;
	for (char* p = s; *p;) {
		if (!strncmp(p, "&amp;", 5)) *o++ = '&', p += 5;
		else if (!strncmp(p, "&quot;", 6)) *o++ = '"', p += 6;
		else if (!strncmp(p, "&lt;", 4)) *o++ = '<', p += 4;
		else if (!strncmp(p, "&gt;", 4)) *o++ = '>', p += 4;
		else *o++ = *p++;
	}
	*o = 0;
}

/* A double attribute of the tag at p, NAN when absent. */
static double attr_num(const char* p, const char* name)
{
	char v[64];
	return attr(p, name, v, sizeof v) ? NAN : strtod(v, NULL);
}

static int near(double a, double b) { return isfinite(a) && isfinite(b) && fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)); }

/* The mechanism table against its rules (DIR/mechanisms.json): one CPU, one CUDA and one paper
 * cell per mechanism; in a measured cell the figures are the ones the selectors name (their
 * values were tied to their receipts above), the effect and peer ratios are those figures' and
 * the verdict is what the rules give; an unmeasured cell says so and carries its "missing"
 * verdict; the paper's cell is the file's. */
static void check_mechanisms(const char* dir, const char* page, FILE* out, int* n)
{
	int cells = 0;
	for (const char* p = page; (p = strstr(p, "<td class=\"mc\"")); p++) cells++;
	if (!cells && !strstr(page, "id=\"mechanisms\"")) return;
	char path[8192];
	snprintf(path, sizeof path, "%s/mechanisms.json", dir);
	json_t* spec = json_load_file(path, 0, NULL);
	char err[400];
	if (!spec) {
		if (cells) problem(out, n, "the page has a mechanism table but %s cannot be read", path);
		return;
	}
	if (ev_mech_check(spec, err, sizeof err)) {
		problem(out, n, "%s: %s", path, err);
		json_decref(spec);
		return;
	}
	const json_t* ms = json_object_get(spec, "mechanisms");
	if (cells != 3 * (int)json_array_size(ms))
		problem(out, n, "the mechanism table has %d cells, its rules %zu mechanisms (3 cells each)", cells, json_array_size(ms));
	for (const char* p = page; (p = strstr(p, "<td class=\"mc\"")); p++) {
		char id[128] = "", col[16] = "", verdict[32] = "";
		attr(p, "data-mech", id, sizeof id);
		unescape(id);
		attr(p, "data-col", col, sizeof col);
		attr(p, "data-verdict", verdict, sizeof verdict);
		unescape(verdict);
		const char* end = strstr(p, "</td>");
		if (!end) break;
		const json_t* m = NULL;
		size_t i;
		json_t* x;
		json_array_foreach(ms, i, x) if (!strcmp(sor(sget(x, "id"), ""), id)) m = x;
		if (!m) {
			problem(out, n, "mechanism %s is not in mechanisms.json", id);
			continue;
		}
		if (!strcmp(col, "paper")) {
			const json_t* pp = json_object_get(m, "paper");
			double want = json_number_value(json_object_get(pp, "value")), have = attr_num(p, "data-value");
			if (json_is_number(json_object_get(pp, "value")) ? !near(want, have) : isfinite(have))
				problem(out, n, "%s/paper: the page shows %g, mechanisms.json has %g", id, have, want);
			if (strcmp(verdict, sor(sget(pp, "verdict"), "not measured"))) problem(out, n, "%s/paper: verdict %s is not the file's", id, verdict);
			continue;
		}
		const json_t* cell = json_object_get(m, col);
		if (!cell) {
			problem(out, n, "%s: no column %s in mechanisms.json", id, col);
			continue;
		}
		/* the cell's figures by role */
		double v[3] = { NAN, NAN, NAN }; /* main, base, peer */
		const char* roles[3] = { "main", "base", "peer" };
		int nalso = 0;
		for (const char* q = p; (q = strstr(q, "<span class=\"f")) && q < end; q++) {
			char role[16] = "", fig[256] = "";
			int is_field = !strncmp(q, "<span class=\"fld\"", 17);
			if (!is_field && strncmp(q, "<span class=\"fig\"", 17)) continue;
			attr(q, "data-role", role, sizeof role);
			attr(q, is_field ? "data-field" : "data-figure", fig, sizeof fig);
			unescape(fig);
			const json_t* sel = NULL;
			for (int k = 0; k < 3; k++)
				if (!strcmp(role, roles[k])) {
					v[k] = attr_num(q, "data-value");
					sel = json_object_get(cell, roles[k]);
				}
			if (!strcmp(role, "also")) sel = json_array_get(json_object_get(cell, "also"), nalso++);
			if (!sel || strcmp(fig, sor(sget(sel, is_field ? "field" : "figure"), "")))
				problem(out, n, "%s/%s: the %s figure %s is not the one its selector names", id, col, role, fig);
		}
		if (!isfinite(v[0])) {
			const char *mv, *why;
			mech_missing(cell, &mv, &why);
			char nm[] = "<em class=\"nm\">not measured</em>";
			const char* at = strstr(p, nm);
			if (!at || at > end) problem(out, n, "%s/%s: a cell without its figure must say \"not measured\"", id, col);
			if (strcmp(verdict, mv)) problem(out, n, "%s/%s: verdict %s, but an unmeasured cell's is %s", id, col, verdict, mv);
			continue;
		}
		double effect = isfinite(v[1]) ? v[0] / v[1] : NAN, peer = isfinite(v[2]) ? v[0] / v[2] : NAN;
		double pe = attr_num(p, "data-effect"), pq = attr_num(p, "data-peer");
		if (isfinite(effect) != isfinite(pe) || (isfinite(effect) && !near(effect, pe)))
			problem(out, n, "%s/%s: effect %g is not main / base = %g", id, col, pe, effect);
		if (isfinite(peer) != isfinite(pq) || (isfinite(peer) && !near(peer, pq)))
			problem(out, n, "%s/%s: peer ratio %g is not main / peer = %g", id, col, pq, peer);
		const json_t* rule = mech_rule(cell, v[0], effect, peer);
		if (strcmp(verdict, sor(sget(rule, "verdict"), "not measured")))
			problem(out, n, "%s/%s: verdict %s, but its rules give %s", id, col, verdict, sor(sget(rule, "verdict"), "none"));
	}
	json_decref(spec);
}

int ev_report_check_static(const char* dir, FILE* out)
{
	int n = 0;
	char path[8192];
	snprintf(path, sizeof path, "%s/index.html", dir);
	size_t len;
	char* page = read_all(path, &len);
	if (!page) {
		problem(out, &n, "cannot read %s", path);
		return n;
	}
	if (strlen(page) != len) problem(out, &n, "%s holds a NUL byte", path);
	/* the page's own digest */
	const char* meta = strstr(page, "<meta name=\"proven-source-sha256\" content=\"");
	if (!meta) problem(out, &n, "no proven-source-sha256 meta element");
	else {
		char* v = (char*)meta + strlen("<meta name=\"proven-source-sha256\" content=\"");
		char claimed[65];
		snprintf(claimed, sizeof claimed, "%.64s", v);
		memcpy(v, ZERO64, 64);
		char hex[65];
		ev_sha256_hex(page, len, hex);
		memcpy(v, claimed, 64);
		if (strcmp(hex, claimed)) problem(out, &n, "the page's sha256 is %s, its meta element says %s", hex, claimed);
	}
	if (strstr(page, "<script") || strstr(page, "<SCRIPT")) problem(out, &n, "the page has a script");
	/* every figure: a scope, a receipt that resolves, matches its digest and holds the figure */
	int figs = 0;
	/* figure rows (<tr class="fig">) and the mechanism table's figures (<span class="fig">) */
	for (const char* at = page; (at = strstr(at, " class=\"fig")); at++) {
		const char* p = at;
		while (p > page && *p != '<') p--;
		if (strncmp(p, "<tr ", 4) && strncmp(p, "<span ", 6)) continue;
		figs++;
		char id[32] = "", name[256] = "", scope[64] = "", val[64] = "", sha[80] = "";
		attr(p, "data-receipt", id, sizeof id);
		attr(p, "data-figure", name, sizeof name);
		unescape(name);
		attr(p, "data-value", val, sizeof val);
		attr(p, "data-sha256", sha, sizeof sha);
		if (attr(p, "data-scope", scope, sizeof scope) || !ev_scope_ok(scope)) {
			problem(out, &n, "figure %s (receipt %s) has no valid scope", name, id[0] ? id : "none");
			continue;
		}
		if (!id[0]) {
			problem(out, &n, "figure %s has no receipt", name);
			continue;
		}
		snprintf(path, sizeof path, "%s/receipts/%s.json", dir, id);
		json_t* rec = json_load_file(path, 0, NULL);
		if (!rec) {
			problem(out, &n, "figure %s: receipt %s is missing (%s)", name, id, path);
			continue;
		}
		const char* stored = sget(rec, "sha256");
		json_object_del(rec, "id");
		json_t* copy = json_deep_copy(rec);
		json_object_del(copy, "sha256");
		char hex[65];
		ev_sha256_json(copy, hex);
		json_decref(copy);
		if (!stored || strcmp(hex, stored) || strcmp(hex, sha))
			problem(out, &n, "receipt %s: its content's sha256 is %.16s, the receipt says %.16s, the page %.16s", id, hex, stored ? stored : "none", sha);
		const char *fs = NULL, *fu = NULL;
		double fv = fig_value(rec, name, &fs, &fu), pv = strtod(val, NULL);
		if (!isfinite(fv) || !fs || strcmp(fs, scope) || fabs(fv - pv) > 1e-9 * fabs(fv))
			problem(out, &n, "figure %s = %s (%s) is not what receipt %s holds (%.17g, %s)", name, val, scope, id, fv, fs ? fs : "absent");
		json_decref(rec);
	}
	if (!figs) problem(out, &n, "the page shows no figure");
	/* numbers a receipt holds outside its figures (the mechanism table's memory sizes) */
	for (const char* p = page; (p = strstr(p, "<span class=\"fld\"")); p++) {
		char id[32] = "", field[256] = "", val[64] = "", sha[80] = "";
		attr(p, "data-receipt", id, sizeof id);
		attr(p, "data-field", field, sizeof field);
		unescape(field);
		attr(p, "data-value", val, sizeof val);
		attr(p, "data-sha256", sha, sizeof sha);
		snprintf(path, sizeof path, "%s/receipts/%s.json", dir, id);
		json_t* rec = json_load_file(path, 0, NULL);
		if (!rec) {
			problem(out, &n, "field %s: receipt %s is missing (%s)", field, id, path);
			continue;
		}
		json_t* copy = json_deep_copy(rec);
		json_object_del(copy, "id");
		json_object_del(copy, "sha256");
		char hex[65];
		ev_sha256_json(copy, hex);
		json_decref(copy);
		if (strcmp(sor(sget(rec, "sha256"), ""), sha) || strcmp(hex, sha))
			problem(out, &n, "field %s: receipt %s: its content's sha256 is %.16s, the page says %.16s", field, id, hex, sha);
		const json_t* fv = at_path(rec, field);
		if (!json_is_number(fv) || !near(json_number_value(fv), strtod(val, NULL)))
			problem(out, &n, "field %s = %s is not what receipt %s holds", field, val, id);
		json_decref(rec);
	}
	check_mechanisms(dir, page, out, &n);
	/* links: local files that exist, anchors that exist, nothing external */
	for (const char* p = page; (p = strstr(p, " href=\"")); p++) {
		char h[4096];
		const char* s = p + 7;
		const char* q = strchr(s, '"');
		if (!q) break;
		snprintf(h, sizeof h, "%.*s", (int)(q - s), s);
		unescape(h);
		if (!strncmp(h, "http:", 5) || !strncmp(h, "https:", 6) || !strncmp(h, "//", 2)) {
			problem(out, &n, "external link %s", h);
			continue;
		}
		if (h[0] == '#') {
			char want[4200];
			snprintf(want, sizeof want, " id=\"%s\"", h + 1);
			if (!strstr(page, want)) problem(out, &n, "broken link %s (no such anchor)", h);
			continue;
		}
		char* hash = strchr(h, '#');
		if (hash) *hash = 0;
		snprintf(path, sizeof path, "%s/%s", dir, h);
		struct stat sb;
		if (stat(path, &sb)) problem(out, &n, "broken link %s", h);
	}
	for (const char* p = page; (p = strstr(p, " src=\"")); p++) {
		char s[600];
		attr(p, "src", s, sizeof s);
		if (!strncmp(s, "http", 4) || !strncmp(s, "//", 2)) problem(out, &n, "external asset %s", s);
	}
	/* alt text: every img an alt, every svg a role, a label and a title */
	for (const char* p = page; (p = strstr(p, "<img")); p++) {
		char a[512];
		if (attr(p, "alt", a, sizeof a) || !a[0]) problem(out, &n, "an <img> without alt text");
	}
	for (const char* p = page; (p = strstr(p, "<svg")); p++) {
		char a[512];
		const char* end = strstr(p, "</svg>");
		const char* t = strstr(p, "<title>");
		if (attr(p, "aria-label", a, sizeof a) || !a[0] || !t || (end && t > end)) problem(out, &n, "an <svg> without alt text (aria-label and <title>)");
	}
	free(page);
	return n;
}

/* ==== Screenshots ============================================================================== */

static uint32_t be32(const unsigned char* p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* An 8-bit RGB or RGBA PNG as RGBA rows; NULL with a message in err. */
static unsigned char* png_rgba(const char* path, int* w, int* h, char* err, size_t errlen)
{
	size_t n;
	unsigned char* f = (unsigned char*)read_all(path, &n);
	unsigned char *idat = NULL, *raw = NULL, *img = NULL;
	size_t ni = 0;
	int W = 0, H = 0, ct = 0;
	if (!f || n < 8 || memcmp(f, "\x89PNG\r\n\x1a\n", 8)) {
		snprintf(err, errlen, "%s is not a PNG", path);
		goto out;
	}
	for (size_t p = 8; p + 12 <= n;) {
		uint32_t len = be32(f + p);
		const unsigned char* type = f + p + 4;
		if (p + 12 + len > n) break;
		if (!memcmp(type, "IHDR", 4) && len >= 13) {
			W = (int)be32(f + p + 8);
			H = (int)be32(f + p + 12);
			ct = f[p + 17];
			if (f[p + 16] != 8 || (ct != 2 && ct != 6) || f[p + 20] != 0 || W <= 0 || H <= 0 || W > 20000 || H > 40000) {
				snprintf(err, errlen, "%s: only 8-bit RGB/RGBA PNGs without interlace are read", path);
				goto out;
			}
		} else if (!memcmp(type, "IDAT", 4)) {
			unsigned char* ni2 = realloc(idat, ni + len);
			if (!ni2) goto out;
			idat = ni2;
			memcpy(idat + ni, f + p + 8, len);
			ni += len;
		}
		p += 12 + len;
	}
	int bpp = ct == 6 ? 4 : 3;
	uLongf rl = (uLongf)H * (uLongf)(1 + (size_t)W * bpp);
	raw = malloc(rl);
	img = malloc((size_t)W * H * 4);
	if (!W || !raw || !img || uncompress(raw, &rl, idat, ni) != Z_OK || rl != (uLongf)H * (1 + (size_t)W * bpp)) {
		snprintf(err, errlen, "%s: cannot inflate its image data", path);
		free(img);
		img = NULL;
		goto out;
	}
	size_t stride = (size_t)W * bpp;
	for (int y = 0; y < H; y++) {
		unsigned char* row = raw + (size_t)y * (stride + 1);
		int ft = row[0];
		unsigned char* cur = row + 1;
		unsigned char* prev = y ? raw + (size_t)(y - 1) * (stride + 1) + 1 : NULL;
		for (size_t x = 0; x < stride; x++) {
			int a = x >= (size_t)bpp ? cur[x - bpp] : 0, b = prev ? prev[x] : 0, c = prev && x >= (size_t)bpp ? prev[x - bpp] : 0;
			int v = cur[x];
			switch (ft) {
			case 1: v += a; break;
			case 2: v += b; break;
			case 3: v += (a + b) / 2; break;
			case 4: {
				int pp = a + b - c, pa = abs(pp - a), pb = abs(pp - b), pc = abs(pp - c);
				v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
				break;
			}
			default: break;
			}
			cur[x] = (unsigned char)v;
		}
		for (int x = 0; x < W; x++) {
			unsigned char* o = img + ((size_t)y * W + x) * 4;
			o[0] = cur[x * bpp];
			o[1] = cur[x * bpp + 1];
			o[2] = cur[x * bpp + 2];
			o[3] = bpp == 4 ? cur[x * bpp + 3] : 255;
		}
	}
	*w = W;
	*h = H;
out:
	free(f);
	free(idat);
	free(raw);
	return img;
}

/* The layout of one screenshot: content in the right margin (the page is wider than the
 * viewport: with body padding 16 CSS px, nothing is drawn in the rightmost margin_px device
 * columns unless something overflows) or a blank page. Returns the problems found. */
int ev_report_check_shot(const char* png, const char* what, int margin_px, FILE* out)
{
	int n = 0, w = 0, h = 0;
	char err[512];
	unsigned char* img = png_rgba(png, &w, &h, err, sizeof err);
	if (!img) {
		problem(out, &n, "%s: %s", what, err);
		return n;
	}
	long ink = 0, margin = 0;
	int first_y = -1;
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			const unsigned char* p = img + ((size_t)y * w + x) * 4;
			int bg = p[0] > 245 && p[1] > 245 && p[2] > 245;
			if (bg) continue;
			ink++;
			if (x >= w - margin_px) {
				margin++;
				if (first_y < 0) first_y = y;
			}
		}
	if (ink < 2000) problem(out, &n, "%s: the page rendered (almost) blank (%ld non-white pixels)", what, ink);
	if (margin) problem(out, &n, "%s: the layout breaks: content reaches the right edge (%ld pixels, first at y=%d): something is wider than the viewport", what, margin, first_y);
	free(img);
	return n;
}

/*
 * report.c: `proven report --out DIR` (the static evidence page, evidence/report.c) and
 * `proven report --check DIR`, the release gate: the static checks, then the page rendered by
 * headless Chromium at a phone's width (390 px) and a desktop's (1280 px), each screenshot
 * inspected for content past the right margin (a layout wider than the viewport) and for a blank
 * page. The screenshots stay in DIR/check/ for a reader.
 */
#include "cli.h"
#include "evidence/evidence.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* chromium's path: --chromium, PROVEN_CHROMIUM, or chromium / chromium-browser on the PATH */
static int find_chromium(const char* given, char* out, size_t n)
{
	if (!given) given = getenv("PROVEN_CHROMIUM");
	if (given && given[0]) {
		snprintf(out, n, "%s", given);
		return access(out, X_OK);
	}
	const char* path = getenv("PATH");
	const char* names[] = { "chromium", "chromium-browser", "google-chrome" };
	for (int k = 0; k < 3; k++)
		for (const char* p = path ? path : "/usr/bin:/bin"; p && *p;) {
			const char* c = strchr(p, ':');
			size_t l = c ? (size_t)(c - p) : strlen(p);
			snprintf(out, n, "%.*s/%s", (int)l, p, names[k]);
			if (!access(out, X_OK)) return 0;
			p = c ? c + 1 : NULL;
		}
	return -1;
}

/* the page at half scale (Chromium's smallest): a window of w x h CSS pixels gives a PNG of half
 * that, so a long page fits under the renderer's ~16k-pixel limit */
static int shoot(const char* chromium, const char* page, const char* png, int w, int h)
{
	char cmd[16384];
	unlink(png);
	/* --no-sandbox: the gate runs as root on CI; the page is our own file with no script */
	snprintf(cmd, sizeof cmd,
	         "timeout 120 '%s' --headless=new --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --disable-extensions "
	         "--force-device-scale-factor=0.5 --window-size=%d,%d --screenshot='%s' 'file://%s' >/dev/null 2>&1",
	         chromium, w, h, png, page);
	int rc = system(cmd);
	struct stat sb;
	return rc == 0 && !stat(png, &sb) && sb.st_size > 0 ? 0 : -1;
}

int cmd_report(int argc, char** argv)
{
	const char *out = NULL, *check = NULL, *title = NULL, *chromium = NULL, *mech = NULL;
	int browser = 1;
	for (int i = 1; i < argc; i++) {
		const char* a = argv[i];
		if (cli_is_help(a)) return cli_usage("report", stdout);
		if (!strcmp(a, "--no-browser")) {
			browser = 0;
			continue;
		}
		NEED_VALUE(i);
		const char* v = argv[++i];
		if (!strcmp(a, "--out")) out = v;
		else if (!strcmp(a, "--check")) check = v;
		else if (!strcmp(a, "--title")) title = v;
		else if (!strcmp(a, "--mechanisms")) mech = v;
		else if (!strcmp(a, "--chromium")) chromium = v;
		else {
			fprintf(stderr, "proven report: unknown option %s\n", a);
			return 2;
		}
	}
	if (!out == !check) {
		fprintf(stderr, "proven report: give --out DIR (build the page) or --check DIR (the release gate)\n");
		return 2;
	}
	char err[512];
	if (out) {
		ev_store* st = NULL;
		if (ev_store_open(&st, ev_ledger_path(), err, sizeof err)) {
			fprintf(stderr, "proven report: %s\n", err);
			return 1;
		}
		int rc = ev_report_write_with(st, out, title, mech, err, sizeof err);
		ev_store_close(st);
		if (rc) {
			fprintf(stderr, "proven report: %s\n", err);
			return 1;
		}
		printf("%s/index.html\n", out);
		return 0;
	}
	int problems = ev_report_check_static(check, stdout);
	if (browser) {
		char exe[PATH_MAX], page[PATH_MAX], dir[PATH_MAX + 16];
		if (find_chromium(chromium, exe, sizeof exe)) {
			printf("report --check: no Chromium to render the page (apt-get install chromium, --chromium PATH, or --no-browser)\n");
			problems++;
		} else {
			char idx[PATH_MAX + 16];
			snprintf(idx, sizeof idx, "%s/index.html", check);
			snprintf(dir, sizeof dir, "%s/check", check);
			if (!realpath(idx, page) || (mkdir(dir, 0755) && access(dir, W_OK))) {
				printf("report --check: cannot prepare %s\n", dir);
				problems++;
			} else {
				struct {
					int w, h;
					const char* name;
				} shots[] = { { 390, 60000, "phone-390" }, { 1280, 30000, "desktop-1280" } };
				for (int k = 0; k < 2; k++) {
					char png[PATH_MAX + 64], what[64];
					snprintf(png, sizeof png, "%s/%s.png", dir, shots[k].name);
					snprintf(what, sizeof what, "at %d px", shots[k].w);
					if (shoot(exe, page, png, shots[k].w, shots[k].h)) {
						printf("report --check: %s could not render the page %s\n", exe, what);
						problems++;
					} else problems += ev_report_check_shot(png, what, 4, stdout); /* 16 CSS px of padding = 8 device px at half scale */
				}
			}
		}
	}
	printf("%s: %s (%d problem%s)\n", check, problems ? "FAILS the release gate" : "passes the release gate", problems, problems == 1 ? "" : "s");
	return problems ? 1 : 0;
}

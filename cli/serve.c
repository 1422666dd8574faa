/*
 * serve.c: `proven serve ARGS` runs proven-server ARGS (the program beside this one, else the one
 * on the PATH). The server is a program of its own because it links libmicrohttpd (and through
 * it gnutls) dynamically: the `proven` tool stays free of the HTTP library and self-contained for
 * GPU machines that have only glibc and the driver, and a server can be deployed without the
 * tool. Replacing this process keeps the signals (SIGTERM drains) and the exit code the server's.
 */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cmd_serve(int argc, char** argv)
{
	char self[PATH_MAX], path[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	argv[0] = "proven-server";
	if (n > 0) {
		self[n] = 0;
		char* slash = strrchr(self, '/');
		if (slash) {
			*slash = 0;
			snprintf(path, sizeof path, "%s/proven-server", self);
			if (access(path, X_OK) == 0) {
				execv(path, argv);
				fprintf(stderr, "proven serve: cannot run %s: %s\n", path, strerror(errno));
				return 1;
			}
		}
	}
	execvp("proven-server", argv);
	fprintf(stderr, "proven serve: proven-server is not beside proven nor on the PATH (make builds build/proven-server): %s\n",
	        strerror(errno));
	return 1;
}

#include "cli.h"
#include <stdio.h>
int cmd_workload(int argc, char** argv) { (void)argc; (void)argv; fprintf(stderr, "todo\n"); return 2; }
int cmd_bench_workload(int argc, char** argv) { (void)argc; (void)argv; fprintf(stderr, "todo\n"); return 2; }

/* buildinfo.c: the build identity printed by `proven bench` (rebuilt on every make). */
#ifndef PV_GIT_COMMIT
#define PV_GIT_COMMIT "unknown"
#endif
#ifndef PV_BUILD_FLAGS
#define PV_BUILD_FLAGS "unknown"
#endif
const char* pv_build_commit = PV_GIT_COMMIT;
const char* pv_build_flags = PV_BUILD_FLAGS;
const char* pv_build_compiler =
#if defined(__clang__)
	"clang " __clang_version__;
#elif defined(__GNUC__)
	"gcc " __VERSION__;
#else
	"unknown";
#endif

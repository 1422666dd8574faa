/*
 * api.c: the top of the library: the backend registry (the one place that names a backend),
 * opening a model (load it, then attach a backend by name) and the calls that dispatch to a
 * backend without a session.
 */
#include "base/log.h"
#include "base/util.h"
#include "engine/backend.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

extern const struct pv_backend pv_backend_cpu; /* cpu/backend.c */
const struct pv_backend* pv_backend_cuda(void); /* cuda/session.cu, or NULL (cuda/stub.c) */

const struct pv_backend* pv_backend_find(const char* name)
{
	if (!name || !strcmp(name, "cpu")) return &pv_backend_cpu;
	if (!strcmp(name, "cuda")) return pv_backend_cuda();
	return NULL;
}

const char* pv_status_name(int status)
{
	switch (status) {
	case PV_OK: return "PV_OK";
	case PV_E_INVALID: return "PV_E_INVALID";
	case PV_E_CONTEXT: return "PV_E_CONTEXT";
	case PV_E_NOMEM: return "PV_E_NOMEM";
	case PV_E_DEVICE: return "PV_E_DEVICE";
	case PV_E_UNSUPPORTED: return "PV_E_UNSUPPORTED";
	case PV_E_IO: return "PV_E_IO";
	case PV_E_FORMAT: return "PV_E_FORMAT";
	case PV_E_NUMERIC: return "PV_E_NUMERIC";
	default: return "unknown";
	}
}

/* The named backend, or why there is none. */
static const struct pv_backend* backend_named(const char* name, char* err, size_t errlen, int* rc)
{
	const struct pv_backend* be = pv_backend_find(name);
	*rc = PV_OK;
	if (be) return be;
	if (!strcmp(name, "cuda")) {
		pv_errf(err, errlen, "backend cuda: this build of proven has no CUDA backend (rebuild with nvcc on PATH)");
		*rc = PV_E_UNSUPPORTED;
	} else {
		pv_errf(err, errlen, "unknown backend \"%s\" (cpu or cuda)", name);
		*rc = PV_E_INVALID;
	}
	return NULL;
}

int pv_model_open(pv_model** out, const char* path, const struct pv_model_params* params, char* err, size_t errlen)
{
	*out = NULL;
	struct pv_model_params p = { 0 };
	if (params) p = *params;
	int rc;
	const struct pv_backend* be = backend_named(p.backend ? p.backend : "cpu", err, errlen, &rc);
	if (!be) return rc;
	struct pv_model* m = pv_xcalloc(1, sizeof *m);
	pthread_mutex_init(&m->digest_lock, NULL);
	rc = pv_model_load(m, path, &p, err, errlen);
	if (!rc) {
		rc = be->model_init(m, &p, err, errlen);
		if (!rc) m->backend = be;
	}
	if (rc) {
		pv_model_unload(m);
		free(m);
		return rc;
	}
	*out = m;
	return PV_OK;
}

void pv_model_close(pv_model* m)
{
	if (!m) return;
	if (m->backend && m->backend->model_free) m->backend->model_free(m); /* device weights */
	pv_model_unload(m);
	free(m);
}

int pv_model_knobs(const pv_model* m, const struct pv_knob** out)
{
	*out = NULL;
	return m->backend->model_knobs ? m->backend->model_knobs(m, out) : 0;
}

int pv_model_device_stats(const pv_model* m, struct pv_model_device_stats* st)
{
	memset(st, 0, sizeof(*st));
	return m->backend->model_device_stats ? m->backend->model_device_stats(m, st) : PV_E_UNSUPPORTED;
}

int pv_device_info(const char* backend, struct pv_device_info* d, char* err, size_t errlen)
{
	memset(d, 0, sizeof(*d));
	int rc;
	const struct pv_backend* be = backend_named(backend ? backend : "cpu", err, errlen, &rc);
	if (!be) return rc;
	if (!be->device_info) return pv_errf(err, errlen, "backend %s has no device", be->name), PV_E_UNSUPPORTED;
	return be->device_info(d, err, errlen);
}

int pv_device_membw(const char* backend, size_t bytes, int reps, double* gb_s, char* err, size_t errlen)
{
	*gb_s = 0;
	int rc;
	const struct pv_backend* be = backend_named(backend ? backend : "cpu", err, errlen, &rc);
	if (!be) return rc;
	if (!be->membw) return pv_errf(err, errlen, "backend %s has no device", be->name), PV_E_UNSUPPORTED;
	return be->membw(bytes, reps, gb_s, err, errlen);
}

/*
 * shm.h: the local shared-memory protocol of the server (proven_client.h is its client side).
 */
#ifndef PV_SERVER_SHM_H
#define PV_SERVER_SHM_H

#include "engine.h"

#include <stddef.h>

struct srv_shm;

/* Listens on a UNIX socket at path (mode 0600; a stale socket file is replaced). Peers must have
 * uid `uid` (-1: the server's own; another uid also gets the socket file chowned to it). */
int srv_shm_start(struct srv_shm** out, const char* path, int uid, struct srv_engine* e, char* err, size_t errlen);
/* Closes the socket, ends every client's session, removes the socket file. NULL: nothing. */
void srv_shm_stop(struct srv_shm* s);

#endif

/* store.h: inside the evidence folder only: the store's SQLite handle and helpers. */
#ifndef PV_EVIDENCE_STORE_H
#define PV_EVIDENCE_STORE_H

#include <sqlite3.h>

#include "evidence.h"

struct ev_store {
	sqlite3* db;
	char path[4096];
};

/* sqlite3_exec with the message into err; 0 or -1 */
int ev_sql(ev_store* st, const char* sql, char* err, size_t errlen);
/* the rows of a one-text-column query (each parsed as JSON) as an array */
json_t* ev_sql_docs(ev_store* st, const char* sql, const char* bind1, int limit);

#endif

/*
 * store.c: the ledger database (SQLite, WAL, synchronous=FULL). One row per receipt holds the
 * whole document and the indexed columns the field table names; figures get a row each for
 * queries; verdicts and crystals have their own tables. Every write is one transaction, so a
 * process killed mid-write leaves the database as it was before that write.
 */
#include "store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char ledger_path[4096];

const char* ev_ledger_path(void)
{
	const char* p = getenv("PROVEN_LEDGER");
	if (p && !strcmp(p, "off")) return NULL;
	if (p && p[0]) return p;
	const char* x = getenv("XDG_DATA_HOME");
	const char* h = getenv("HOME");
	if (x && x[0]) snprintf(ledger_path, sizeof ledger_path, "%s/proven/ledger.db", x);
	else snprintf(ledger_path, sizeof ledger_path, "%s/.local/share/proven/ledger.db", h && h[0] ? h : ".");
	return ledger_path;
}

int ev_sql(ev_store* st, const char* sql, char* err, size_t errlen)
{
	char* msg = NULL;
	if (sqlite3_exec(st->db, sql, NULL, NULL, &msg) == SQLITE_OK) return 0;
	snprintf(err, errlen, "%s: %s", st->path, msg ? msg : sqlite3_errmsg(st->db));
	sqlite3_free(msg);
	return -1;
}

static int mkdirs(const char* path)
{
	char buf[4096];
	snprintf(buf, sizeof buf, "%s", path);
	char* slash = strrchr(buf, '/');
	if (!slash || slash == buf) return 0;
	*slash = 0;
	for (char* p = buf + 1; *p; p++) {
		if (*p != '/') continue;
		*p = 0;
		if (mkdir(buf, 0755) && errno != EEXIST) return -1;
		*p = '/';
	}
	return mkdir(buf, 0755) && errno != EEXIST ? -1 : 0;
}

/* The indexed columns of the receipts table come from the field table. */
static int create_schema(ev_store* st, char* err, size_t errlen)
{
	char sql[4096];
	size_t n = (size_t)snprintf(sql, sizeof sql, "CREATE TABLE IF NOT EXISTS receipts(id INTEGER PRIMARY KEY, doc TEXT NOT NULL, "
	                                             "doc_sha256 TEXT NOT NULL");
	for (int i = 0; i < ev_receipt_n_fields; i++) {
		const struct ev_field* f = &ev_receipt_fields[i];
		if (!f->column) continue;
		const char* t = !strcmp(f->type, "integer") || !strcmp(f->type, "boolean") ? "INTEGER" : !strcmp(f->type, "number") ? "REAL" : "TEXT";
		n += (size_t)snprintf(sql + n, sizeof sql - n, ", %s %s", f->column, t);
	}
	snprintf(sql + n, sizeof sql - n, ");");
	if (ev_sql(st, sql, err, errlen)) return -1;
	return ev_sql(st,
	              "CREATE INDEX IF NOT EXISTS receipts_kind ON receipts(kind);"
	              "CREATE TABLE IF NOT EXISTS figures(receipt_id INTEGER NOT NULL REFERENCES receipts(id), name TEXT NOT NULL, "
	              "  scope TEXT NOT NULL, unit TEXT NOT NULL, value REAL NOT NULL, sd REAL, n INTEGER);"
	              "CREATE INDEX IF NOT EXISTS figures_receipt ON figures(receipt_id);"
	              "CREATE TABLE IF NOT EXISTS verdicts(id INTEGER PRIMARY KEY, created TEXT, court TEXT, crystal TEXT, verdict TEXT, "
	              "  doc TEXT NOT NULL);"
	              "CREATE TABLE IF NOT EXISTS crystals(name TEXT PRIMARY KEY, status TEXT NOT NULL, doc TEXT NOT NULL);",
	              err, errlen);
}

int ev_store_open(ev_store** out, const char* path, char* err, size_t errlen)
{
	*out = NULL;
	if (!path) {
		snprintf(err, errlen, "receipts are off (PROVEN_LEDGER=off)");
		return -1;
	}
	ev_store* st = calloc(1, sizeof *st);
	if (!st) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	snprintf(st->path, sizeof st->path, "%s", path);
	if (mkdirs(path)) {
		snprintf(err, errlen, "cannot create the folder of %s: %s", path, strerror(errno));
		free(st);
		return -1;
	}
	if (sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "cannot open %s: %s", path, st->db ? sqlite3_errmsg(st->db) : "out of memory");
		sqlite3_close(st->db);
		free(st);
		return -1;
	}
	sqlite3_busy_timeout(st->db, 30000);
	if (ev_sql(st, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;", err, errlen) ||
	    create_schema(st, err, errlen)) {
		ev_store_close(st);
		return -1;
	}
	*out = st;
	return 0;
}

void ev_store_close(ev_store* st)
{
	if (!st) return;
	sqlite3_close(st->db);
	free(st);
}

static int64_t put_receipt(ev_store* st, json_t* doc, int commit, char* err, size_t errlen)
{
	if (ev_receipt_check(doc, err, errlen)) return -1;
	json_object_del(doc, "id");
	json_object_del(doc, "sha256");
	char hex[65];
	ev_sha256_json(doc, hex);
	char* text = json_dumps(doc, JSON_SORT_KEYS | JSON_COMPACT);
	if (!text) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	char sql[2048];
	size_t n = (size_t)snprintf(sql, sizeof sql, "INSERT INTO receipts(doc, doc_sha256");
	int nq = 2;
	for (int i = 0; i < ev_receipt_n_fields; i++)
		if (ev_receipt_fields[i].column) {
			n += (size_t)snprintf(sql + n, sizeof sql - n, ", %s", ev_receipt_fields[i].column);
			nq++;
		}
	n += (size_t)snprintf(sql + n, sizeof sql - n, ") VALUES(?");
	for (int i = 1; i < nq; i++) n += (size_t)snprintf(sql + n, sizeof sql - n, ",?");
	snprintf(sql + n, sizeof sql - n, ")");
	sqlite3_stmt* s = NULL;
	int64_t id = -1;
	if (ev_sql(st, "BEGIN IMMEDIATE", err, errlen)) {
		free(text);
		return -1;
	}
	if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK) goto fail;
	sqlite3_bind_text(s, 1, text, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(s, 2, hex, -1, SQLITE_TRANSIENT);
	int k = 3;
	for (int i = 0; i < ev_receipt_n_fields; i++) {
		const struct ev_field* f = &ev_receipt_fields[i];
		if (!f->column) continue;
		const json_t* v = ev_field_value(doc, f->path);
		if (!v || json_is_null(v)) sqlite3_bind_null(s, k);
		else if (json_is_boolean(v)) sqlite3_bind_int(s, k, json_is_true(v));
		else if (json_is_integer(v)) sqlite3_bind_int64(s, k, json_integer_value(v));
		else if (json_is_number(v)) sqlite3_bind_double(s, k, json_number_value(v));
		else if (json_is_string(v)) sqlite3_bind_text(s, k, json_string_value(v), -1, SQLITE_TRANSIENT);
		else sqlite3_bind_null(s, k);
		k++;
	}
	if (sqlite3_step(s) != SQLITE_DONE) goto fail;
	sqlite3_finalize(s);
	s = NULL;
	id = sqlite3_last_insert_rowid(st->db);
	if (sqlite3_prepare_v2(st->db, "INSERT INTO figures VALUES(?,?,?,?,?,?,?)", -1, &s, NULL) != SQLITE_OK) goto fail;
	size_t i;
	json_t* fg;
	json_array_foreach(json_object_get(doc, "figures"), i, fg)
	{
		sqlite3_reset(s);
		sqlite3_bind_int64(s, 1, id);
		sqlite3_bind_text(s, 2, json_string_value(json_object_get(fg, "name")), -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(s, 3, json_string_value(json_object_get(fg, "scope")), -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(s, 4, json_string_value(json_object_get(fg, "unit")), -1, SQLITE_TRANSIENT);
		sqlite3_bind_double(s, 5, json_number_value(json_object_get(fg, "value")));
		sqlite3_bind_double(s, 6, json_number_value(json_object_get(fg, "sd")));
		sqlite3_bind_int64(s, 7, json_integer_value(json_object_get(fg, "n")));
		if (sqlite3_step(s) != SQLITE_DONE) goto fail;
	}
	sqlite3_finalize(s);
	s = NULL;
	free(text);
	if (!commit) return id;
	if (ev_sql(st, "COMMIT", err, errlen)) {
		ev_sql(st, "ROLLBACK", (char[8]){ 0 }, 8);
		return -1;
	}
	json_object_set_new(doc, "id", json_integer(id));
	json_object_set_new(doc, "sha256", json_string(hex));
	return id;
fail:
	snprintf(err, errlen, "%s: %s", st->path, sqlite3_errmsg(st->db));
	sqlite3_finalize(s);
	free(text);
	ev_sql(st, "ROLLBACK", (char[8]){ 0 }, 8);
	return -1;
}

int64_t ev_store_put_receipt(ev_store* st, json_t* doc, char* err, size_t errlen) { return put_receipt(st, doc, 1, err, errlen); }
int64_t ev_store_put_uncommitted(ev_store* st, json_t* doc, char* err, size_t errlen) { return put_receipt(st, doc, 0, err, errlen); }

/* a stored receipt's document with its id and sha256 */
static json_t* receipt_row(sqlite3_stmt* s)
{
	const char* text = (const char*)sqlite3_column_text(s, 1);
	json_t* d = text ? json_loads(text, 0, NULL) : NULL;
	if (!d) return NULL;
	json_object_set_new(d, "id", json_integer(sqlite3_column_int64(s, 0)));
	json_object_set_new(d, "sha256", json_string((const char*)sqlite3_column_text(s, 2)));
	return d;
}

json_t* ev_store_get_receipt(ev_store* st, int64_t id)
{
	sqlite3_stmt* s = NULL;
	json_t* d = NULL;
	if (sqlite3_prepare_v2(st->db, "SELECT id, doc, doc_sha256 FROM receipts WHERE id = ?", -1, &s, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(s, 1, id);
		if (sqlite3_step(s) == SQLITE_ROW) d = receipt_row(s);
	}
	sqlite3_finalize(s);
	return d;
}

json_t* ev_store_receipts(ev_store* st, const char* kind_prefix, int limit)
{
	sqlite3_stmt* s = NULL;
	json_t* a = json_array();
	const char* sql = kind_prefix ? "SELECT id, doc, doc_sha256 FROM receipts WHERE kind = ?1 OR kind LIKE ?1 || '.%' ORDER BY id DESC"
	                              : "SELECT id, doc, doc_sha256 FROM receipts ORDER BY id DESC";
	if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) == SQLITE_OK) {
		if (kind_prefix) sqlite3_bind_text(s, 1, kind_prefix, -1, SQLITE_TRANSIENT);
		while (sqlite3_step(s) == SQLITE_ROW && (!limit || (int)json_array_size(a) < limit)) {
			json_t* d = receipt_row(s);
			if (d) json_array_append_new(a, d);
		}
	}
	sqlite3_finalize(s);
	return a;
}

int ev_store_integrity(ev_store* st, char* err, size_t errlen)
{
	sqlite3_stmt* s = NULL;
	int ok = 0;
	if (sqlite3_prepare_v2(st->db, "PRAGMA integrity_check", -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
		ok = !strcmp((const char*)sqlite3_column_text(s, 0), "ok");
	if (!ok) snprintf(err, errlen, "%s: integrity check failed: %s", st->path, s ? (const char*)sqlite3_column_text(s, 0) : "?");
	sqlite3_finalize(s);
	return ok ? 0 : -1;
}

json_t* ev_sql_docs(ev_store* st, const char* sql, const char* bind1, int limit)
{
	sqlite3_stmt* s = NULL;
	json_t* a = json_array();
	if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) == SQLITE_OK) {
		if (bind1) sqlite3_bind_text(s, 1, bind1, -1, SQLITE_TRANSIENT);
		while (sqlite3_step(s) == SQLITE_ROW && (!limit || (int)json_array_size(a) < limit)) {
			const char* t = (const char*)sqlite3_column_text(s, 0);
			json_t* d = t ? json_loads(t, 0, NULL) : NULL;
			if (d && sqlite3_column_count(s) > 1) json_object_set_new(d, "id", json_integer(sqlite3_column_int64(s, 1)));
			if (d) json_array_append_new(a, d);
		}
	}
	sqlite3_finalize(s);
	return a;
}

int64_t ev_store_put_verdict(ev_store* st, json_t* v, char* err, size_t errlen)
{
	char now[32];
	ev_utc_now(now);
	if (!json_object_get(v, "created")) json_object_set_new(v, "created", json_string(now));
	json_object_del(v, "id");
	char* text = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT);
	sqlite3_stmt* s = NULL;
	int64_t id = -1;
	if (text && sqlite3_prepare_v2(st->db, "INSERT INTO verdicts(created, court, crystal, verdict, doc) VALUES(?,?,?,?,?)", -1, &s, NULL) ==
	                    SQLITE_OK) {
		sqlite3_bind_text(s, 1, json_string_value(json_object_get(v, "created")), -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(s, 2, json_string_value(json_object_get(v, "court")), -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(s, 3, json_string_value(json_object_get(v, "crystal")), -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(s, 4, json_string_value(json_object_get(v, "verdict")), -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(s, 5, text, -1, SQLITE_TRANSIENT);
		if (sqlite3_step(s) == SQLITE_DONE) id = sqlite3_last_insert_rowid(st->db);
	}
	if (id < 0) snprintf(err, errlen, "%s: %s", st->path, sqlite3_errmsg(st->db));
	else json_object_set_new(v, "id", json_integer(id));
	sqlite3_finalize(s);
	free(text);
	return id;
}

json_t* ev_store_verdicts(ev_store* st, const char* crystal, int limit)
{
	return ev_sql_docs(st,
	                   crystal ? "SELECT doc, id FROM verdicts WHERE crystal = ? ORDER BY id DESC" : "SELECT doc, id FROM verdicts ORDER BY id DESC",
	                   crystal, limit);
}

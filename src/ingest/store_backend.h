/* store_backend: the backends' handles, for the store's files that speak
 * to a backend directly (store_contents.c) and nothing else. */
#ifndef SG_STORE_BACKEND_H
#define SG_STORE_BACKEND_H

#include <libpq-fe.h>
#include <sqlite3.h>

#include "base/err.h"
#include "ingest/store.h"

/* The SQLite handle of s (and its path), or NULL when s is not SQLite. */
sqlite3 *sg_store_sqlite_db(sg_store *s, const char **path);
/* The live PostgreSQL connection of s (reconnected if it was lost; where:
 * its description for messages), or NULL: not PostgreSQL (err untouched)
 * or no connection (err set). */
PGconn *sg_store_pg_conn(sg_store *s, const char **where, sg_err *err);

/* Every statement on s's connection, and on each it opens again, ends
 * after ms milliseconds at most (PostgreSQL's statement_timeout): for the
 * connections that serve readers, which nobody may hold for long. 0, or
 * -1 with err (EINVAL: s is not PostgreSQL). */
int sg_store_pg_statement_timeout(sg_store *s, unsigned ms, sg_err *err);

#endif

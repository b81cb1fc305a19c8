/* evrows: the rows of one GET /v1/events page as text, without a tree
 * (for `sandglass events`, cli/cmd_events.c).
 *
 * The ingest writes each row around its stored payload as it is
 * (ingest/store.h: sg_store_event_json), so --json can print each row's
 * text instead of parsing the page and dumping every row again. The bytes
 * must stay those jansson's compact dump of the parsed row gives (what
 * `events --json` printed before): each row is copied with the whitespace
 * between tokens dropped, reals written by jansson itself, and anything
 * whose dump could differ from its text (an escape jansson writes another
 * way, a non-canonical integer, invalid UTF-8, a duplicate key, a deep
 * nest, a page of another shape) makes the scan give up: the caller then
 * parses the page with jansson as before. */
#ifndef SG_CLI_EVROWS_H
#define SG_CLI_EVROWS_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "base/buf.h"

/* One member of a row's object or of its payload's, in out: its key's text
 * (quotes off, escapes as in the text; kesc: it has one) and its value's
 * compact text (str: a string, quotes on; vesc: it has an escape). */
typedef struct sg_evmember {
    size_t key_off, key_len, val_off, val_len;
    bool kesc, str, vesc;
} sg_evmember;

/* One row: its compact text at out.data + off (len bytes, no newline), and
 * the row's own fields the printer needs ("kind" and "ts" as plain
 * strings in out: their text has no escape; absent: len 0, has_ false),
 * and of its payload when that is an object: its "label"'s text when a
 * string (as in the row: escapes not undone) and whether it has an
 * "error" (the timeline hides a checkpoint by them, unparsed). */
typedef struct sg_evrow {
    size_t off, len;
    long long id, seq;
    size_t kind_off, kind_len, ts_off, ts_len;
    bool has_id, has_seq, has_kind, has_ts;
    bool payload_obj, has_label, has_error;
    size_t label_off, label_len;
    /* with pg->members, its members, pg->mem[mem .. mem + nmem), and its
     * payload's (when an object) at pmem, npmem, each in the text's order */
    size_t mem, nmem, pmem, npmem;
} sg_evrow;

typedef struct sg_evpage {
    sg_buf out;     /* the rows' compact text, each followed by '\n' */
    sg_evrow *rows;
    size_t n, cap;
    bool members;     /* set by the caller: the scan keeps each row's members (mem) */
    sg_evmember *mem; /* the rows' members and their payloads' (sg_evrow) */
    size_t nmem, mem_cap;
    bool more, more_given; /* the page's "more", and whether it had one */
} sg_evpage;

/* Scans body (len bytes: {"events":[ROW,...],"more":B,...}) into pg
 * (emptied first, its memory kept): 0, or -1 when the page is not in the
 * form the copy is exact for (or out of memory): parse it with jansson. */
int sg_evpage_scan(sg_evpage *pg, const char *body, size_t len);
void sg_evpage_free(sg_evpage *pg);
/* Row r of a scanned page as a tree, the one json_loadb would build from
 * its text (the scan's checks make a plain build exact: no lexer byte by
 * byte); NULL out of memory. */
json_t *sg_evrow_tree(const sg_evpage *pg, const sg_evrow *r);

#endif

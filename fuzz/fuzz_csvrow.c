/* libFuzzer target: `export --format csv`'s row written from the ingest's
 * text (src/cli/export_csv.c's text path: the members sg_evpage_scan
 * found, no tree) against the row written from jansson's parse of the same
 * text. The rows are the ingest's answer and their payloads are
 * learner-controlled.
 *
 * Input: any bytes. When they parse as a JSON object (duplicate keys
 * refused, as the ingest validated the payload) whose "payload" is an
 * object, its compact dump is the row's text, scanned as a page of one row
 * (fuzz_evrows holds the scan's half; a row the scan does not take is
 * written from the tree by the export, so only the tree's path is left).
 * Invariant: both paths succeed and write the same bytes. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "cli/evrows.h"
#include "cli/export.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *write_row(json_t *ev, const sg_evpage *pg, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        abort();
    sg_export x = {.fmt = &sg_export_csv, .out = f};
    sg_err err;
    int r = sg_export_csv.begin(&x, &err) < 0 ? -1 : pg ? sg_export_csv.row_text(&x, pg, &pg->rows[0], &err) : sg_export_csv.row(&x, ev, &err);
    if (r < 0 || sg_export_csv.end(&x, &err) < 0) /* begin sorts the columns; end frees buffers */
        abort();
    fclose(f);
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *ev = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(ev) || !json_is_object(json_object_get(ev, "payload"))) {
        json_decref(ev);
        return 0;
    }
    char *text = json_dumps(ev, JSON_COMPACT);
    sg_buf page = {0};
    if (!text || sg_buf_puts(&page, "{\"events\":[") < 0 || sg_buf_puts(&page, text) < 0 ||
        sg_buf_puts(&page, "],\"more\":false}") < 0)
        abort();
    sg_evpage pg = {.members = true};
    if (sg_evpage_scan(&pg, page.data, page.len) == 0) {
        if (pg.n != 1)
            abort();
        size_t tlen = 0, jlen = 0;
        char *from_text = write_row(NULL, &pg, &tlen), *from_tree = write_row(ev, NULL, &jlen);
        if (tlen != jlen || memcmp(from_text, from_tree, tlen) != 0)
            abort();
        free(from_text);
        free(from_tree);
    }
    sg_evpage_free(&pg);
    sg_buf_free(&page);
    free(text);
    json_decref(ev);
    return 0;
}

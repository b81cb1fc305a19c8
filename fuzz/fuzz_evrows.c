/* libFuzzer target: a /v1/events page's rows as text (src/cli/evrows.c),
 * against jansson. The page is the ingest's answer, and its payloads are
 * learner-controlled; `events --json` prints the scanned rows in place of
 * json_dumps(JSON_COMPACT) of the parsed page, so the bytes must be the
 * same whenever the scan takes a page.
 *
 * Input: the bytes after {"events":[ (the page's rows and end, as sent).
 * Invariant: when sg_evpage_scan takes it, the whole page parses (with
 * duplicate keys rejected, as the command parses it) and each row's text
 * is the compact dump of that row, its "more" the page's, and its id,
 * seq, kind and ts the row's; the row's tree (sg_evrow_tree, what the
 * timeline prints from) equals the row jansson parsed; its payload's
 * label and error as the row's payload has them, the label's text
 * beginning with "before exec " or "before shell command " when the
 * string does (the timeline hides such a checkpoint unparsed); its
 * members and its payload's (what export's csv writes from) as many as
 * the objects', each one's value the compact dump of the value its key
 * names (a key without an escape). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "cli/evrows.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_row(const sg_evpage *pg, const sg_evrow *r, json_t *ev)
{
    char *dump = json_dumps(ev, JSON_COMPACT);
    if (!dump || strlen(dump) != r->len || memcmp(dump, pg->out.data + r->off, r->len) != 0 ||
        pg->out.data[r->off + r->len] != '\n')
        abort();
    free(dump);
    json_t *tree = sg_evrow_tree(pg, r);
    if (!tree || !json_equal(tree, ev) || json_typeof(tree) != json_typeof(ev))
        abort();
    json_decref(tree);
    json_t *pl = json_object_get(ev, "payload"), *label = json_object_get(pl, "label");
    if (r->payload_obj != json_is_object(pl) || r->has_error != (json_object_get(pl, "error") != NULL) ||
        r->has_label != json_is_string(label))
        abort();
    static const char *const pre[] = {"before exec ", "before shell command "};
    for (int k = 0; r->has_label && k < 2; k++) {
        size_t n = strlen(pre[k]);
        bool raw = r->label_len >= n && !memcmp(pg->out.data + r->label_off, pre[k], n);
        bool str = json_string_length(label) >= n && !memcmp(json_string_value(label), pre[k], n);
        if (raw != str)
            abort();
    }
    /* the members kept (pg->members), the row's and its payload's */
    if (r->nmem != json_object_size(ev) || r->npmem != (json_is_object(pl) ? json_object_size(pl) : 0))
        abort();
    for (size_t i = 0; i < r->nmem + r->npmem; i++) {
        const sg_evmember *m = &pg->mem[i < r->nmem ? r->mem + i : r->pmem + i - r->nmem];
        json_t *parent = i < r->nmem ? ev : pl;
        char *key = strndup(pg->out.data + m->key_off, m->key_len);
        json_t *v = key && !m->kesc ? json_object_get(parent, key) : NULL;
        char *vd = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        if (!key || (!m->kesc && (!vd || strlen(vd) != m->val_len || memcmp(vd, pg->out.data + m->val_off, m->val_len) ||
                                  m->str != json_is_string(v))))
            abort();
        free(vd);
        free(key);
    }
    json_t *id = json_object_get(ev, "id"), *seq = json_object_get(ev, "seq");
    if (r->has_id != json_is_integer(id) || (r->has_id && r->id != json_integer_value(id)) ||
        r->has_seq != json_is_integer(seq) || (r->has_seq && r->seq != json_integer_value(seq)))
        abort();
    const char *keys[] = {"kind", "ts"};
    for (int k = 0; k < 2; k++) {
        const char *v = json_string_value(json_object_get(ev, keys[k]));
        bool has = k ? r->has_ts : r->has_kind;
        size_t off = k ? r->ts_off : r->kind_off, len = k ? r->ts_len : r->kind_len;
        if (has != (v != NULL) || (v && (strlen(v) != len || memcmp(v, pg->out.data + off, len) != 0)))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sg_buf page = {0};
    if (sg_buf_puts(&page, "{\"events\":[") < 0 || sg_buf_append(&page, data, size) < 0)
        abort();
    sg_evpage pg = {.members = true};
    if (sg_evpage_scan(&pg, page.data, page.len) == 0) {
        json_error_t je;
        json_t *j = json_loadb(page.data, page.len, JSON_REJECT_DUPLICATES, &je);
        json_t *rows = json_object_get(j, "events"), *more = json_object_get(j, "more");
        if (!json_is_array(rows) || json_array_size(rows) != pg.n || pg.more_given != (more != NULL) ||
            pg.more != json_is_true(more))
            abort();
        for (size_t i = 0; i < pg.n; i++)
            check_row(&pg, &pg.rows[i], json_array_get(rows, i));
        json_decref(j);
    }
    sg_evpage_free(&pg);
    sg_buf_free(&page);
    return 0;
}

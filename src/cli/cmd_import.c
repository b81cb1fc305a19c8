/* sandglass import FILE [--store URL | --ingest URL [--ingest-ca FILE] [--secret FILE]]
 * Loads a JSONL export (sandglass export --format jsonl) into a store, as
 * the rows it was exported from: the same learner, task, sandbox, seq,
 * kind, ts, received and payload bytes (ingest/store_import.h). An
 * operator's action, never through a read token: either through the
 * ingest (--ingest: POST /v1/import with an operator write token made
 * from the ingest's secret, which only the operator holds), or on the
 * store itself (--store URL, default the local ingest's
 * <state>/ingest/events.db: the store's own access, the file's 0600 or the
 * database's credentials, is the authority).
 *
 * All rows go in one transaction, all or nothing; a bad line is named (its
 * number and what is wrong), and nothing is imported. A row already in the
 * store (its learner, task, sandbox and seq) is left as it is, and counted. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/cmds.h"
#include "cli/ingest_op.h"
#include "cli/report.h"
#include "ingest/store.h"
#include "ingest/store_import.h"
#include "state/state.h"

static const char usage[] =
    "usage: sandglass import FILE [--store URL]\n"
    "       sandglass import FILE --ingest URL [--ingest-ca FILE] [--secret FILE]\n"
    "  FILE     a jsonl export (sandglass export --format jsonl); - for stdin\n"
    "  --store  the store to load (default sqlite:<state>/ingest/events.db;\n"
    "           postgresql://... for PostgreSQL)\n"
    "  --ingest load it through the ingest at URL (POST /v1/import), with an\n"
    "           operator write token made from the ingest's secret\n"
    "  --ingest-ca  the CA file an https ingest is verified by\n"
    "  --secret the ingest's secret file (default <state>/ingest/secret)\n";

/* FILE through the ingest: its bytes sent as they are (stdin or another
 * file that is not regular first copied to a temporary file, whose size
 * the request's Content-Length needs). */
static int import_ingest(const sg_cli_op *o, FILE *f, const char *path)
{
    struct stat st;
    FILE *copy = NULL;
    if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode)) {
        char buf[65536];
        size_t n;
        if (!(copy = tmpfile()))
            return sg_cli_failf("import", "temporary file: %s", strerror(errno));
        while ((n = fread(buf, 1, sizeof buf, f)) > 0)
            if (fwrite(buf, 1, n, copy) != n)
                break;
        if (ferror(f) || ferror(copy) || fflush(copy) != 0 || fstat(fileno(copy), &st) < 0) {
            fclose(copy);
            return sg_cli_failf("import", "read %s: %s (nothing imported)", path, strerror(errno));
        }
        rewind(copy);
        f = copy;
    }
    sg_err err;
    int status = 0;
    sg_autojson json_t *ans = st.st_size > 0 ? sg_cli_op_post(o, "import", "/v1/import", fileno(f),
                                                              (size_t)st.st_size, &status, &err)
                                             : json_pack("{s:i, s:i}", "imported", 0, "already", 0);
    if (copy)
        fclose(copy);
    if (!ans)
        return sg_cli_failf("import", "%s: %s", path, err.msg);
    printf("imported %lld events (%lld already in the store)\n",
           (long long)json_integer_value(json_object_get(ans, "imported")),
           (long long)json_integer_value(json_object_get(ans, "already")));
    return 0;
}

/* FILE into the store at url directly. */
static int import_store(const char *url, FILE *f, const char *path)
{
    sg_err err;
    sg_store_import_result res = {0};
    sg_store *s = sg_store_open(url, &err);
    int rc = s ? sg_store_import(s, f, &res, &err) : -1;
    if (s)
        sg_store_close(s);
    if (rc < 0 && res.bad_line)
        return sg_cli_failf("import", "%s %s (nothing imported)", path, err.msg);
    if (rc < 0)
        return sg_cli_failf("import", "%s (nothing imported)", err.msg);
    printf("imported %zu events (%zu already in the store)\n", res.inserted, res.total - res.inserted);
    return 0;
}

int sg_cmd_import(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"store", required_argument, NULL, 's'},  {"ingest", required_argument, NULL, 'i'},
        {"ingest-ca", required_argument, NULL, 'C'}, {"secret", required_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
    const char *store = NULL;
    sg_cli_op o = {0};
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 's': store = optarg; break;
        case 'i': o.ingest = optarg; break;
        case 'C': o.ingest_ca = optarg; break;
        case 'k': o.secret_path = optarg; break;
        case 'h': fputs(usage, stdout); return 0;
        default: return sg_cli_bad_option("import", argv[optind - 1]);
        }
    }
    if (optind != argc - 1)
        return sg_cli_usage("import", "one FILE to import (a jsonl export)");
    if (store && o.ingest)
        return sg_cli_usage("import", "--store or --ingest, not both");
    if (!o.ingest && (o.ingest_ca || o.secret_path))
        return sg_cli_usage("import", "--ingest-ca and --secret go with --ingest");
    const char *path = argv[optind];
    sg_err err;
    sg_autofree char *store_default = NULL;
    if (!store && !o.ingest) {
        if (!sg_state_dir(&err))
            return sg_cli_failf("import", "state directory: %s", err.msg);
        sg_autofree char *db = sg_state_path("ingest/events.db");
        store = store_default = sg_strdup_printf("sqlite:%s", db);
    }
    FILE *f = strcmp(path, "-") ? fopen(path, "re") : stdin;
    if (!f)
        return sg_cli_failf("import", "open %s: %s", path, strerror(errno));
    int rc = o.ingest ? import_ingest(&o, f, path) : import_store(store, f, path);
    if (f != stdin)
        fclose(f);
    return rc;
}

/* config: the operator's defaults (config.h). The files are read by
 * libinih; this module only says which sections and keys exist and checks
 * each value with the parser its flag uses. */
#include "cli/config.h"

#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bounds.h"
#include "base/cleanup.h"
#include "base/log.h"
#include "base/util.h"
#include "state/state.h"

typedef enum {
    V_PATH,        /* an absolute path */
    V_TEXT,        /* checked by the command that uses it */
    V_SIZE,        /* 512M */
    V_DURATION,    /* 90, 15m, 2h, 7d */
    V_LIFE,        /* a duration, or off */
    V_UINT,        /* 1 and up */
    V_COUNT,       /* 0 and up */
    V_CPUS,        /* 0.5 */
    V_LEVEL,       /* error, warn, info, debug */
    V_CHECKPOINTS, /* exec, manual */
} conf_type;

static const struct {
    const char *section, *name, *env;
    conf_type type;
} keys[SG_CONF__COUNT] = {
    [SG_CONF_STATE_DIR] = {"sandglass", "state-dir", "SANDGLASS_STATE_DIR", V_PATH},
    [SG_CONF_LOG_LEVEL] = {"sandglass", "log-level", "SANDGLASS_LOG_LEVEL", V_LEVEL},
    [SG_CONF_POOL_SIZE] = {"sandglass", "pool-size", "SANDGLASS_POOL_SIZE", V_COUNT},
    [SG_CONF_MAX_SANDBOXES] = {"sandglass", "max-sandboxes", "SANDGLASS_MAX_SANDBOXES", V_UINT},
    [SG_CONF_INGEST] = {"ingest", "url", "SANDGLASS_INGEST", V_TEXT},
    [SG_CONF_SECRET] = {"ingest", "secret", "SANDGLASS_SECRET", V_PATH},
    [SG_CONF_INGEST_CA] = {"ingest", "ca", "SANDGLASS_INGEST_CA", V_PATH},
    [SG_CONF_MEMORY] = {"limits", "memory", "SANDGLASS_MEMORY", V_SIZE},
    [SG_CONF_PIDS] = {"limits", "pids", "SANDGLASS_PIDS", V_UINT},
    [SG_CONF_CPUS] = {"limits", "cpus", "SANDGLASS_CPUS", V_CPUS},
    [SG_CONF_TIMEOUT] = {"limits", "timeout", "SANDGLASS_TIMEOUT", V_DURATION},
    [SG_CONF_OUTPUT_LIMIT] = {"limits", "output-limit", "SANDGLASS_OUTPUT_LIMIT", V_SIZE},
    [SG_CONF_DISK] = {"limits", "disk", "SANDGLASS_DISK", V_SIZE},
    [SG_CONF_MAX_WALL] = {"caps", "max-wall", "SANDGLASS_MAX_WALL", V_DURATION},
    [SG_CONF_MAX_EXECS] = {"caps", "max-execs", "SANDGLASS_MAX_EXECS", V_UINT},
    [SG_CONF_MAX_CPU] = {"caps", "max-cpu", "SANDGLASS_MAX_CPU", V_DURATION},
    [SG_CONF_MAX_CALLS] = {"caps", "max-calls", "SANDGLASS_MAX_CALLS", V_UINT},
    [SG_CONF_CHECKPOINTS] = {"caps", "checkpoints", "SANDGLASS_CHECKPOINTS", V_CHECKPOINTS},
    [SG_CONF_MAX_EVENTS_PER_MIN] = {"caps", "max-events-per-min", "SANDGLASS_MAX_EVENTS_PER_MIN", V_UINT},
    [SG_CONF_MAX_BYTES_PER_MIN] = {"caps", "max-bytes-per-min", "SANDGLASS_MAX_BYTES_PER_MIN", V_SIZE},
    [SG_CONF_MAX_CHECKPOINTS_PER_MIN] = {"caps", "max-checkpoints-per-min", "SANDGLASS_MAX_CHECKPOINTS_PER_MIN",
                                         V_UINT},
    [SG_CONF_MAX_FILE_EVENTS] = {"caps", "max-file-events", "SANDGLASS_MAX_FILE_EVENTS", V_UINT},
    [SG_CONF_CAPTURE_IGNORE] = {"caps", "capture-ignore", "SANDGLASS_CAPTURE_IGNORE", V_TEXT},
    [SG_CONF_CAPTURE_MAX_FILE] = {"caps", "capture-max-file", "SANDGLASS_CAPTURE_MAX_FILE", V_SIZE},
    [SG_CONF_IDLE_TIMEOUT] = {"session", "idle-timeout", "SANDGLASS_IDLE_TIMEOUT", V_LIFE},
    [SG_CONF_TTL] = {"session", "ttl", "SANDGLASS_TTL", V_LIFE},
    [SG_CONF_EXPIRY_WARNING] = {"session", "expiry-warning", "SANDGLASS_EXPIRY_WARNING", V_LIFE},
    [SG_CONF_KEEP] = {"session", "keep", "SANDGLASS_KEEP", V_LIFE},
};

#define SECTIONS "sandglass, ingest, limits, caps, session"

/* Each key's value and where it came from; NULL: the built-in default. */
static struct {
    char *value, *origin;
} vals[SG_CONF__COUNT];
static bool loaded;
static const char *system_file = SG_CONFIG_SYSTEM_FILE;

/* One file being read: its lines counted by our reader, its first error. */
typedef struct conf_file {
    const char *path;
    FILE *f;
    int line;             /* the physical line the last read belongs to */
    bool cont;            /* the last read ended inside a line */
    int seen[SG_CONF__COUNT]; /* the line each key was set on */
    int err_line;
    char err[512];
} conf_file;

const char *sg_config_key_name(sg_conf_key key)
{
    return key < SG_CONF__COUNT ? keys[key].name : "?";
}

void sg_config_reset(void)
{
    for (int k = 0; k < SG_CONF__COUNT; k++) {
        free(vals[k].value);
        free(vals[k].origin);
        vals[k].value = vals[k].origin = NULL;
    }
    loaded = false;
}

void sg_config_set_system_file(const char *path)
{
    system_file = path ? path : SG_CONFIG_SYSTEM_FILE;
}

const char *sg_config_get(sg_conf_key key, const char **origin)
{
    if (key >= SG_CONF__COUNT || !vals[key].value)
        return NULL;
    if (origin)
        *origin = vals[key].origin;
    return vals[key].value;
}

const char *sg_config_ingest_given(void)
{
    const char *v = sg_config_get(SG_CONF_INGEST, NULL);
    return v && *v ? v : NULL;
}

const char *sg_config_ingest(void)
{
    const char *v = sg_config_get(SG_CONF_INGEST, NULL);
    return v && *v ? v : SG_DEFAULT_INGEST_URL;
}

char *sg_config_secret(void)
{
    const char *v = sg_config_get(SG_CONF_SECRET, NULL);
    return v ? sg_xstrdup(v) : sg_state_path("ingest/secret");
}

/* Whether v is a value of type t; err says why not. The flag's own parser,
 * so that a value means in a file what it means on the command line. */
static int check_value(conf_type t, const char *v, sg_err *err)
{
    uint64_t u;
    double d;
    switch (t) {
    case V_PATH:
        return v[0] == '/' ? 0 : sg_err_set(err, EINVAL, "'%s' is not an absolute path", v);
    case V_TEXT:
        return 0;
    case V_SIZE:
        return sg_parse_size(v, &u, err);
    case V_DURATION:
        return sg_parse_duration(v, 365 * 24 * 3600.0, &d, err);
    case V_LIFE:
        return strcmp(v, "off") == 0 ? 0 : sg_parse_duration(v, 365 * 24 * 3600.0, &d, err);
    case V_UINT:
        return sg_parse_uint(v, UINT32_MAX, &u, err);
    case V_COUNT:
        return strcmp(v, "0") == 0 ? 0 : sg_parse_uint(v, UINT32_MAX, &u, err);
    case V_CPUS:
        return sg_parse_seconds(v, 1024, &d, err) == 0
                   ? 0
                   : sg_err_set(err, EINVAL, "'%s' is not a positive number of cores", v);
    case V_LEVEL:
    {
        sg_log_level l; /* any case, as the logger reads it (base/log.c) */
        if (sg_log_level_parse(v, &l) < 0)
            return sg_err_set(err, EINVAL, "'%s' is not a level (error, warn, info or debug)", v);
        return 0;
    }
    case V_CHECKPOINTS:
        if (strcmp(v, "exec") && strcmp(v, "manual"))
            return sg_err_set(err, EINVAL, "'%s' is not exec or manual", v);
        return 0;
    }
    return 0;
}

static void set_value(sg_conf_key k, const char *value, char *origin)
{
    free(vals[k].value);
    free(vals[k].origin);
    vals[k].value = sg_xstrdup(value);
    vals[k].origin = origin;
}

static int find_key(const char *name)
{
    for (int k = 0; k < SG_CONF__COUNT; k++)
        if (strcmp(keys[k].name, name) == 0)
            return k;
    return -1;
}

static bool known_section(const char *section)
{
    for (int k = 0; k < SG_CONF__COUNT; k++)
        if (strcmp(keys[k].section, section) == 0)
            return true;
    return false;
}

__attribute__((format(printf, 2, 3))) static int conf_fail(conf_file *cf, const char *fmt, ...)
{
    if (cf->err_line) /* the first error is the one reported */
        return 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cf->err, sizeof cf->err, fmt, ap);
    va_end(ap);
    cf->err_line = cf->line;
    return 0;
}

/* inih's handler: one "key = value" of section. */
static int on_pair(void *user, const char *section, const char *name, const char *value)
{
    conf_file *cf = user;
    int k = find_key(name);
    if (!*section)
        return k < 0 ? conf_fail(cf, "unknown key '%s' outside a section (sections: " SECTIONS ")", name)
                     : conf_fail(cf, "'%s' is outside a section: put it under [%s]", name, keys[k].section);
    if (!known_section(section))
        return conf_fail(cf, "unknown section [%s] (sections: " SECTIONS ")", section);
    if (k < 0)
        return conf_fail(cf, "unknown key '%s' in [%s]", name, section);
    if (strcmp(keys[k].section, section) != 0)
        return conf_fail(cf, "'%s' belongs in [%s], not [%s]", name, keys[k].section, section);
    if (cf->seen[k])
        return conf_fail(cf, "'%s' is given twice (lines %d and %d; a value is one line)", name, cf->seen[k],
                         cf->line);
    sg_err err = {0};
    if (check_value(keys[k].type, value, &err) < 0)
        return conf_fail(cf, "%s: %s", name, err.msg);
    cf->seen[k] = cf->line;
    set_value(k, value, sg_strdup_printf("%s:%d", cf->path, cf->line));
    return 1;
}

/* inih's reader: fgets, counting the file's lines (inih's handler does not
 * get them) and refusing a line longer than inih's buffer, which it would
 * read as two. */
static char *conf_read(char *str, int num, void *stream)
{
    conf_file *cf = stream;
    if (!fgets(str, num, cf->f))
        return NULL;
    if (!cf->cont)
        cf->line++;
    size_t n = strlen(str);
    cf->cont = n > 0 && str[n - 1] != '\n' && !feof(cf->f);
    if (cf->cont)
        conf_fail(cf, "the line is longer than %d bytes", num - 2);
    return str;
}

/* Reads one file into vals; a missing file is no error unless named. */
static int load_file(const char *path, bool named, sg_err *err)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        if (errno == ENOENT && !named)
            return 0;
        return sg_err_sys(err, "%s%s: cannot read", named ? "SANDGLASS_CONFIG: " : "", path);
    }
    conf_file cf = {.path = path, .f = f};
    int rc = ini_parse_stream(conf_read, &cf, on_pair, &cf);
    bool rerr = ferror(f);
    fclose(f);
    if (rerr)
        return sg_err_set(err, EIO, "%s: cannot read", path);
    if (rc == -2)
        return sg_err_set(err, ENOMEM, "%s: out of memory", path);
    if (rc > 0 && (!cf.err_line || rc < cf.err_line))
        return sg_err_set(err, EINVAL, "%s:%d: not a [section], a key = value or a comment", path, rc);
    if (cf.err_line)
        return sg_err_set(err, EINVAL, "%s:%d: %s", path, cf.err_line, cf.err);
    return 0;
}

/* The files in the order they are read, later ones overriding. */
static int load_files(sg_err *err)
{
    const char *one = getenv("SANDGLASS_CONFIG");
    if (one)
        return *one && strcmp(one, "none") != 0 ? load_file(one, true, err) : 0;
    if (load_file(system_file, false, err) < 0)
        return -1;
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    sg_autofree char *user = NULL;
    if (xdg && *xdg == '/') /* a relative one is to be ignored (XDG Base Directory) */
        user = sg_strdup_printf("%s/sandglass/sandglass.conf", xdg);
    else if (home && *home)
        user = sg_strdup_printf("%s/.config/sandglass/sandglass.conf", home);
    return user ? load_file(user, false, err) : 0;
}

int sg_config_reload(sg_err *err)
{
    __typeof__(vals) old;
    memcpy(old, vals, sizeof vals);
    memset(vals, 0, sizeof vals);
    loaded = false;
    if (sg_config_load(err) < 0) { /* it reset what it read: the old values back */
        memcpy(vals, old, sizeof vals);
        loaded = true;
        return -1;
    }
    for (int k = 0; k < SG_CONF__COUNT; k++) {
        free(old[k].value);
        free(old[k].origin);
    }
    return 0;
}

int sg_config_load(sg_err *err)
{
    if (loaded)
        return 0;
    if (load_files(err) < 0) {
        sg_config_reset();
        return -1;
    }
    for (int k = 0; k < SG_CONF__COUNT; k++) {
        const char *v = getenv(keys[k].env);
        if (!v || !*v) /* empty: unset, as it always was for these */
            continue;
        sg_err e = {0};
        if (check_value(keys[k].type, v, &e) < 0) {
            sg_config_reset();
            return sg_err_set(err, EINVAL, "%s: %s", keys[k].env, e.msg);
        }
        set_value(k, v, sg_xstrdup(keys[k].env));
    }
    /* What the state layer, the logger and every child (supervisor,
     * sandglassd, the uplink) read from the environment: the value is the
     * variable's own, or a file's when the variable was unset or empty. */
    static const sg_conf_key exported[] = {SG_CONF_STATE_DIR, SG_CONF_LOG_LEVEL};
    for (size_t i = 0; i < sizeof exported / sizeof *exported; i++)
        if (vals[exported[i]].value && setenv(keys[exported[i]].env, vals[exported[i]].value, 1) < 0) {
            sg_config_reset();
            return sg_err_sys(err, "setenv %s", keys[exported[i]].env);
        }
    loaded = true;
    return 0;
}

/* ttyreplay: a terminal's output without what makes a terminal answer.
 * See ttyreplay.h. A VT500-style parser (vt100.net/emu/dec_ansi_parser)
 * that holds each sequence until its last byte says what it is. */
#include "supervisor/ttyreplay.h"

#include <string.h>

enum { ST_GROUND, ST_ESC, ST_CSI, ST_STR, ST_STR_ESC };
enum { STR_HOLD, STR_PASS, STR_DROP };
enum { K_OSC, K_DCS, K_OTHER };

#define C1(c) (0x100 | (c)) /* a C1 control as a unit: ESC (c - 0x40) */
#define BYTE_ESC 0x1b
#define BYTE_CAN 0x18
#define BYTE_SUB 0x1a

static const char esc_raw[] = "\x1b";
static const char st_raw[] = "\x1b\\";
static const char c2_raw[] = "\xc2";

static void flush_run(sg_ttyreplay *f)
{
    if (f->run_len)
        f->out(f->ud, f->run, f->run_len);
    f->run = NULL;
    f->run_len = 0;
}

/* Passes bytes on; input bytes next to the last ones go in one call. */
static void emit(sg_ttyreplay *f, const char *raw, size_t n, bool input)
{
    /* not the input's: a UTF-8 lead byte or C1 control held from the last piece */
    input = input && raw != c2_raw && raw != (const char *)f->c1raw;
    if (input && f->run && raw == f->run + f->run_len) {
        f->run_len += n;
        return;
    }
    flush_run(f);
    if (input) {
        f->run = raw;
        f->run_len = n;
    } else {
        f->out(f->ud, raw, n);
    }
}

static void hold(sg_ttyreplay *f, const char *raw, size_t n)
{
    if (f->held_len + n > sizeof f->held) {
        f->overflow = true;
        return;
    }
    memcpy(f->held + f->held_len, raw, n);
    f->held_len += n;
}

static void drop_held(sg_ttyreplay *f)
{
    f->held_len = 0;
    f->overflow = false;
}

static void emit_held(sg_ttyreplay *f)
{
    if (f->held_len)
        emit(f, f->held, f->held_len, false);
    drop_held(f);
}

static void start_esc(sg_ttyreplay *f, const char *raw, size_t n)
{
    drop_held(f);
    hold(f, raw, n);
    f->body = f->held_len;
    f->state = ST_ESC;
}

static void start_str(sg_ttyreplay *f, int kind, int str)
{
    f->kind = kind;
    f->str = str;
    f->dcs_head = kind == K_DCS;
    f->body = f->held_len;
    f->state = ST_STR;
    if (str == STR_DROP)
        drop_held(f);
}

/* An ESC sequence's final byte b, held (final_held) or not (a C1
 * control's, b = c - 0x40). */
static void esc_dispatch(sg_ttyreplay *f, int b, bool final_held)
{
    bool inters = f->held_len > f->body + (final_held ? 1 : 0);
    f->state = ST_GROUND;
    if (f->overflow) {
        drop_held(f);
        return;
    }
    if (inters) {
        emit_held(f);
        return;
    }
    switch (b) {
    case '[':
        f->body = f->held_len;
        f->state = ST_CSI;
        return;
    case ']': start_str(f, K_OSC, STR_HOLD); return;
    case 'P': start_str(f, K_DCS, STR_HOLD); return;
    case 'X': case '^': case '_': start_str(f, K_OTHER, STR_DROP); return;
    case 'Z': drop_held(f); return; /* DECID: answered as DA1 */
    default: emit_held(f); return;
    }
}

static int osc_number(const sg_ttyreplay *f)
{
    int num = -1;
    for (size_t i = f->body; i < f->held_len && f->held[i] != ';'; i++) {
        if (f->held[i] < '0' || f->held[i] > '9' || num > 100000)
            return -1;
        num = (num < 0 ? 0 : num * 10) + (f->held[i] - '0');
    }
    return num;
}

/* Titles, cwd, hyperlinks and shell marks ask nothing, '?' or not. */
static bool osc_safe(int num)
{
    return num == 0 || num == 1 || num == 2 || num == 7 || num == 8 || num == 133;
}

static bool osc_query(const sg_ttyreplay *f)
{
    int num = osc_number(f);
    if (osc_safe(num))
        return false;
    if (num == 52 || num == 1337 || num == 5113 || num == 5522)
        return true; /* the clipboard, iTerm2's and kitty's requests */
    return memchr(f->held + f->body, '?', f->held_len - f->body) != NULL;
}

/* A held CSI with final byte fin makes the terminal answer. */
static bool csi_query(const sg_ttyreplay *f, int fin)
{
    const char *p = f->held + f->body;
    size_t n = f->held_len - f->body - 1; /* without the final byte */
    char prefix = n ? p[0] : 0;
#define HAS(c) (memchr(p, (c), n) != NULL)
    switch (fin) {
    case 'n': case 'c': return true;             /* DSR, DA1/2/3 */
    case 'x': return !HAS('*');                  /* DECREQTPARM, DECRQPKFM (+x) */
    case 't': /* window ops: reports, moves and resizes; 22/23 (the title stack) stay */
        return prefix != '>' && !HAS(' ') && !((n == 2 || (n > 2 && p[2] == ';')) && p[0] == '2' &&
                                               (p[1] == '2' || p[1] == '3'));
    case 'q': return prefix == '>';              /* XTVERSION */
    case 'p': return HAS('$');                   /* DECRQM */
    case 'u': return prefix == '?' || HAS('$') || HAS('&');
    case 'm': case 'S': return prefix == '?';    /* XTQMODKEYS, XTSMGRAPHICS */
    case 'w': return HAS('$') || HAS(',');       /* DECRQPSR, DECRQKT */
    case 'y': return HAS('*');                   /* DECRQCRA */
    case '|': return HAS('#');                   /* XTREPORTSGR */
    case 'v': return HAS('"');                   /* DECRQDE */
    default: return false;
    }
#undef HAS
}

static void ground(sg_ttyreplay *f, int u, const char *raw, size_t n)
{
    if (u == BYTE_ESC) {
        start_esc(f, raw, n);
    } else if (u & 0x100) {
        start_esc(f, raw, n);
        esc_dispatch(f, (u & 0xff) - 0x40, false);
    } else {
        emit(f, raw, n, true);
    }
}

/* A unit that ends the sequence being parsed without being part of it:
 * the sequence is left out, the unit starts anew. */
static void abort_seq(sg_ttyreplay *f, int u, const char *raw, size_t n)
{
    drop_held(f);
    f->state = ST_GROUND;
    if (u == BYTE_CAN || u == BYTE_SUB)
        emit(f, raw, n, true);
    else
        ground(f, u, raw, n);
}

static void in_esc(sg_ttyreplay *f, int u, const char *raw, size_t n)
{
    if ((u & 0x100) || u == BYTE_ESC || u == BYTE_CAN || u == BYTE_SUB || u >= 0x80)
        abort_seq(f, u, raw, n);
    else if (u < 0x20)
        emit(f, raw, n, true); /* a C0 control inside a sequence is executed at once */
    else if (u < 0x30)
        hold(f, raw, n);       /* an intermediate */
    else if (u < 0x7f) {
        hold(f, raw, n);
        esc_dispatch(f, u, true);
    }
}

static void in_csi(sg_ttyreplay *f, int u, const char *raw, size_t n)
{
    if ((u & 0x100) || u == BYTE_ESC || u == BYTE_CAN || u == BYTE_SUB || u >= 0x80) {
        abort_seq(f, u, raw, n);
    } else if (u < 0x20) {
        emit(f, raw, n, true);
    } else if (u < 0x40) {
        if (f->held_len >= SG_TTYREPLAY_CSI_MAX)
            f->overflow = true;
        else
            hold(f, raw, n);
    } else if (u < 0x7f) {
        hold(f, raw, n);
        f->state = ST_GROUND;
        if (f->overflow || csi_query(f, u))
            drop_held(f);
        else
            emit_held(f);
    }
}

/* The string ended with a terminator (raw: BEL, ST or C1 ST); sent:
 * whether that terminator may be passed on as it came. */
static void str_end(sg_ttyreplay *f, const char *raw, size_t n, bool input)
{
    if (f->str == STR_HOLD && f->kind == K_OSC && !f->overflow && !osc_query(f)) {
        emit_held(f);
        f->str = STR_PASS;
    }
    if (f->str == STR_PASS)
        emit(f, raw, n, input);
    drop_held(f);
    f->state = ST_GROUND;
}

/* A DCS's parameters, up to the final byte that names it: only sixel
 * (q without intermediates) is passed on. */
static void dcs_head(sg_ttyreplay *f, int u, const char *raw, size_t n)
{
    if (u >= 0x20 && u < 0x40) {
        hold(f, raw, n);
    } else if (u >= 0x40 && u < 0x7f) {
        bool inters = false;
        for (size_t i = f->body; i < f->held_len; i++)
            inters = inters || f->held[i] < 0x30;
        f->dcs_head = false;
        if (u == 'q' && !inters && !f->overflow) {
            hold(f, raw, n);
            emit_held(f);
            f->str = STR_PASS;
        } else {
            drop_held(f);
            f->str = STR_DROP;
        }
    } else if (u >= 0x80) {
        drop_held(f);
        f->dcs_head = false;
        f->str = STR_DROP;
    }
}

static void str_content(sg_ttyreplay *f, int u, const char *raw, size_t n)
{
    if (f->dcs_head) {
        dcs_head(f, u, raw, n);
    } else if (f->str == STR_PASS) {
        emit(f, raw, n, true);
    } else if (f->str == STR_HOLD) {
        hold(f, raw, n);
        if (f->overflow) { /* long: judged by its number alone */
            f->overflow = false;
            if (osc_safe(osc_number(f))) {
                emit_held(f);
                emit(f, raw, n, true);
                f->str = STR_PASS;
            } else {
                drop_held(f);
                f->str = STR_DROP;
            }
        }
    }
}

static void in_str(sg_ttyreplay *f, int u, const char *raw, size_t n)
{
    if (u == C1(0x9c)) {
        str_end(f, raw, n, true);
    } else if (u & 0x100) { /* another C1 control: the string is over */
        str_end(f, st_raw, 2, false);
        ground(f, u, raw, n);
    } else if (u == BYTE_ESC) {
        f->state = ST_STR_ESC;
    } else if (u == 0x07 && f->kind == K_OSC) {
        str_end(f, raw, n, true);
    } else if (u == BYTE_CAN || u == BYTE_SUB) {
        abort_seq(f, u, raw, n);
    } else {
        str_content(f, u, raw, n);
    }
}

/* ESC inside a string: ST, or the string ends there (as terminals end it)
 * and an ESC sequence begins. */
static void in_str_esc(sg_ttyreplay *f, int u, const char *raw, size_t n)
{
    f->state = ST_STR;
    str_end(f, st_raw, 2, false); /* else closed properly for the terminal */
    if (u != '\\') {
        start_esc(f, esc_raw, 1);
        in_esc(f, u, raw, n);
    }
}

static void unit(sg_ttyreplay *f, int u, const char *raw, size_t n)
{
    switch (f->state) {
    case ST_GROUND: ground(f, u, raw, n); break;
    case ST_ESC: in_esc(f, u, raw, n); break;
    case ST_CSI: in_csi(f, u, raw, n); break;
    case ST_STR: in_str(f, u, raw, n); break;
    default: in_str_esc(f, u, raw, n); break;
    }
}

void sg_ttyreplay_init(sg_ttyreplay *f, bool mid_stream, sg_ttyreplay_out out, void *ud)
{
    memset(f, 0, sizeof *f);
    f->resync = mid_stream;
    f->out = out;
    f->ud = ud;
}

/* Whether byte b, at the start of a wrapped buffer, is still a sequence's
 * tail: everything before the first ESC, through the first newline. */
static bool resync_skip(sg_ttyreplay *f, unsigned char b)
{
    if (b == BYTE_ESC || b == '\n')
        f->resync = false;
    return b != BYTE_ESC;
}

/* Bytes to units: C1 controls (8-bit, or UTF-8's C2 80..9F, which may be
 * cut between two pieces) apart from UTF-8 text. */
void sg_ttyreplay_feed(sg_ttyreplay *f, const char *buf, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)buf[i];
        if (f->resync && resync_skip(f, b))
            continue;
        if (f->c2) {
            f->c2 = false;
            if (b >= 0x80 && b <= 0x9f) {
                f->c1raw[0] = 0xc2;
                f->c1raw[1] = b;
                flush_run(f);
                unit(f, C1(b), (const char *)f->c1raw, 2);
                continue;
            }
            unit(f, 0xc2, c2_raw, 1);
            f->u8_left = 1;
        }
        if (f->u8_left > 0 && b >= 0x80 && b <= 0xbf) {
            f->u8_left--;
            unit(f, b, buf + i, 1);
            continue;
        }
        f->u8_left = b >= 0xc3 && b <= 0xdf ? 1 : b >= 0xe0 && b <= 0xef ? 2 : b >= 0xf0 && b <= 0xf4 ? 3 : 0;
        if (b == 0xc2)
            f->c2 = true;
        else
            unit(f, b >= 0x80 && b <= 0x9f ? C1(b) : b, buf + i, 1);
    }
    flush_run(f);
}

void sg_ttyreplay_end(sg_ttyreplay *f)
{
    if (f->c2) {
        f->c2 = false;
        unit(f, 0xc2, c2_raw, 1);
    }
    if (f->state == ST_STR_ESC) /* a passed string's ESC: its ST, maybe */
        f->state = ST_STR;
    if (f->state != ST_STR || f->str != STR_PASS)
        f->state = ST_GROUND;
    drop_held(f);
    flush_run(f);
}

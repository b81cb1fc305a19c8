/* shellrc: the host's shell integration. See shellrc.h. */
#include "sandbox/shellrc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"

static const char launcher[] =
    "# sandglass shell: bash if this sandbox has it, else sh, each with the\n"
    "# host's shell integration (read-only; see bashrc and shrc here).\n"
    "if command -v bash >/dev/null 2>&1; then\n"
    "    exec bash --rcfile /etc/sandglass/bashrc -i\n"
    "fi\n"
    "ENV=/etc/sandglass/shrc\n"
    "export ENV\n"
    "exec sh -l -i\n";

/* bash: a typed line is one command, however many ';', '&&', '&' or
 * pipes it holds: PS0, which bash shows once a line is read and before
 * it runs (not for an empty line), gives C with the line as bash's
 * history holds it (the whole line, PS2 continuations joined; with
 * history off, no cmd); each prompt says the last status (D, as sh's
 * does: PS0 runs in a subshell and cannot tell the prompt a line ran; a
 * D with no command open is none's). ignorespace is dropped from HISTCONTROL
 * so a line typed after a space is still the one history gives. Control
 * characters and ';' in the cwd, control characters in the command, are
 * blanked: a mark is one OSC string. */
static const char bashrc[] =
    "# sandglass: the login set-up, then OSC 133 marks around each typed line.\n"
    "[ -r /etc/profile ] && . /etc/profile\n"
    "[ -r ~/.bashrc ] && . ~/.bashrc\n"
    "HISTCONTROL=${HISTCONTROL//ignoreboth/ignoredups}\n"
    "HISTCONTROL=${HISTCONTROL//ignorespace/}\n"
    "__sg_prompt() {\n"
    "    local s=$?\n"
    "    printf '\\033]133;D;%s\\007' \"$s\"\n"
    "    printf '\\033]133;A;cwd=%s\\007' \"${PWD//[;[:cntrl:]]/?}\"\n"
    "    return $s\n"
    "}\n"
    "__sg_line() {\n"
    "    local l=\n"
    "    if [[ -o history ]]; then\n"
    "        l=$(HISTTIMEFORMAT= history 1)\n"
    "        l=${l#\"${l%%[0-9]*}\"}\n"
    "        l=${l#\"${l%%[!0-9]*}\"}\n"
    "        l=${l#\\*}\n"
    "        l=${l#\"${l%%[! ]*}\"}\n"
    "    fi\n"
    "    printf '\\033]133;C;cwd=%s;cmd=%s\\007' \"${PWD//[;[:cntrl:]]/?}\" \"${l//[[:cntrl:]]/ }\"\n"
    "}\n"
    "PROMPT_COMMAND=\"__sg_prompt${PROMPT_COMMAND:+; $PROMPT_COMMAND}\"\n"
    "PS0='$(__sg_line)'\"$PS0\"\n"
    "PS1=\"${PS1:-\\\\s-\\\\v\\\\\\$ }\\[\\033]133;B\\007\\]\"\n";

/* sh: no hook before a command; the prompt gives D (the last status), A
 * (with the cwd) and B with cmdline=echo: the host reads the command line
 * from the terminal's echo of it (capture/echoline.h). */
static const char shrc[] =
    "# sandglass: OSC 133 marks at each prompt (sh has no hook before a command:\n"
    "# the host reads the command line from the terminal's echo after B).\n"
    "PS1=\"$(printf '\\033]133;D;')\"'$?'\"$(printf '\\007\\033]133;A;cwd=')\"'$PWD'"
    "\"$(printf '\\007')\"'$ '\"$(printf '\\033]133;B;cmdline=echo\\007')\"\n";

static int write_one(const char *dir, const char *name, const char *text, sg_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    sg_autoclose int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return sg_err_sys(err, "cannot create %s", path);
    if (sg_write_all(fd, text, strlen(text)) < 0)
        return sg_err_sys(err, "cannot write %s", path);
    return 0;
}

int sg_shellrc_write(const char *dir, sg_err *err)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return sg_err_sys(err, "cannot create %s", dir);
    if (write_one(dir, "shell", launcher, err) < 0 || write_one(dir, "bashrc", bashrc, err) < 0 ||
        write_one(dir, "shrc", shrc, err) < 0)
        return -1;
    return 0;
}

/* sandglass-exec: what a ready exec child becomes while it waits for its
 * command (init.h). init forks the child, which joins the exec's cgroup
 * leaf, drops its privileges and adds the filter's last rule, then execs
 * this program (from a sealed, execute-only memfd: not readable by the
 * sandbox user, so the kernel makes the process not dumpable from its
 * first instruction). Its address space is a few pages, against the
 * hundreds of a copy of init's: the execve of the user's command, on the
 * exec's path, has next to nothing to tear down.
 *
 *   fd 3: the socket the exec comes on (sg_execchild_take); nothing else.
 */
#include <sys/prctl.h>

#include "sandbox/execchild.h"

int main(void)
{
    prctl(PR_SET_NAME, "sandglass-ready", 0, 0, 0);
    sg_execchild_prefault();
    sg_execchild_take(3);
}

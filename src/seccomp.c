/* seccomp: not written yet. */

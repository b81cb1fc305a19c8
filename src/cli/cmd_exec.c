/* cmd_exec: not written yet. */

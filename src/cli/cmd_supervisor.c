/* cmd_supervisor: not written yet. */

/* cmd_cleanup: not written yet. */

/* cmd_events: not written yet. */

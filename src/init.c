/* init: not written yet. */

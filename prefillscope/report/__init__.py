"""``prefillscope report``: one run as a self-contained HTML page or a terminal view."""

"""An activity in Redis and the operator's hand on it: the meta hash's layout (``meta``), the
activity store (``activities``), creating one (``catalog``), each process's copies
(``cache``), the rebuild from the database (``recovery``), and the levers on a live sale:
pause, resume, end, edit (``controls``), in the order sent (``levers``), and restocks
(``restocks``)."""

"""Training: a compiled forward that keeps what its backward reads, and that backward.

* ``function``      ``ta.function``: forward with residuals, backward reading them
* ``residuals``     which forward values a backward reads, and which it recomputes
* ``saved_values``  elementwise values the backward would compute again, saved by the forward"""

"""The simulator: the real scheduler and workload on a virtual clock, each step priced by a cost model.

target.py (the simulated target: `run_simulated`), replicas.py (dp replicas behind a router),
disaggregated.py (prefill and decode pools on simulated devices with a KV link), step_time.py
(a step's price: the roofline's FLOPs and bytes at fitted fractions of a profile's peaks),
step_line.py and parallel.py (a replica's steps over tensor, pipeline and expert parallel
devices), links.py (the links between them), fit.py (the cost model's terms fitted to measured
steps), published_figures.py and published_fit.py (the published serving figures and the fit
that produces the shipped terms). The analytic roofline the window and the CLI draw is
backend/roofline/; this package prices steps on it.
"""

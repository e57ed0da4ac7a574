"""The simulator: the real scheduler and workload on a virtual clock, each step priced by a cost model.

Its targets: target.py (`run_simulated`: one batch or a workload, dp replicas behind a router from
replicas.py) and disaggregated.py (prefill and decode pools on simulated devices with a KV link).
What they share: runner.py (the runner's contract without a model, on the virtual clock), model.py
(the model's shape, precision and bytes per device, the memory check), info.py (run.json's record of
a simulated run and its price). A step's price: step_time.py (the roofline's FLOPs and bytes at fitted
fractions of a profile's peaks, plus fixed costs), parallel.py and step_line.py (a replica's steps over
tensor, pipeline and expert parallel devices), links.py (the links between devices). The terms:
fit.py (fitted to this machine's measured steps), published_figures.py and published_fit.py (the
published serving figures and the fit that produces the shipped terms).

The analytic roofline it prices steps on, which the window and the CLI also draw, is backend/roofline/.
"""

"""The window's views, one file each: the phase timeline, request lanes, throughput against
batch with its roofline, latency distributions, metrics, precision, the requests table, the
generated text and the disaggregated workers' strip; with the shared plot style and PNG export."""

"""run.json's record of a simulated run and its price: what was priced, on which profile, with which
cost model, how the model was spread over devices, and the cost figures at the devices' price.
The simulated target and the disaggregated simulation both write these.
"""
from __future__ import annotations

from dataclasses import asdict

from backend.config import Deployment, RunConfig
from backend.precision import Precision
from backend.roofline.profiles import GpuProfile
from backend.run_info import DisaggregatedInfo, ReplicasInfo, RunInfo, SimulatedInfo, TargetKind, now_created
from backend.sim.model import model_bytes
from backend.sim.parallel import Layout
from backend.sim.step_time import CostModel
from backend.summary import Summary


def deployment_info(deployment: Deployment, layout: Layout, prec: Precision, devices: int) -> ReplicasInfo:
    """run.json's record of how the model was spread: the layout, its link, the KV dtype, the devices."""
    return ReplicasInfo(tp=layout.tp, pp=layout.pp, dp=deployment.dp, ep=layout.ep, router=deployment.router,
                        devices=devices, link=layout.link.as_dict() if layout.link is not None else None,
                        kv_dtype=prec.kv_dtype)


def simulated_info(config: RunConfig, profile: GpuProfile, shape, prec: Precision, model: CostModel, device: str,
                   source: str, *, kv_capacity: int, kv_slots: int, max_len: int, virtual_s: float, wall_s: float,
                   replicas: ReplicasInfo, disaggregated: DisaggregatedInfo | None = None) -> RunInfo:
    """run.json's info of a simulated run (a run, a workload, a disaggregated layout): what was priced,
    on which profile, with which cost model, spread how."""
    return RunInfo(target=TargetKind.SIMULATED, profile=config.profile, model=config.model.name, source=source,
                   random_weights=False, arch=shape.arch, num_params=shape.num_params(),
                   weight_bytes=model_bytes(shape, prec), shape=asdict(shape), device=device, device_name=profile.name,
                   dtype=prec.name, weight_bits=prec.weight_bits, activation_dtype=prec.activation,
                   kv_dtype=prec.kv_dtype, kv_capacity=kv_capacity, kv_slots=kv_slots, max_len=max_len,
                   created=now_created(), wall_s=wall_s,
                   simulated=SimulatedInfo(profile_name=profile.name, cost_model=model.terms(),
                                           cost_model_source=model.source, virtual_s=virtual_s,
                                           serving_engine=config.deployment.engine),
                   replicas=replicas, disaggregated=disaggregated)


def costs_of(summary: Summary, profile: GpuProfile, prefill_devices: int, decode_devices: int,
             all_devices: int) -> tuple[dict, tuple[str, str] | None]:
    """(the summary's cost figures, (run.json's priced_on, price_source)) of a deployment; nothing
    for a profile without a price."""
    figures = deployment_costs(summary, profile, prefill_devices, decode_devices, all_devices)
    if not figures:
        return {}, None
    return figures, priced_text(profile, all_devices)


def deployment_costs(summary: Summary, profile: GpuProfile, prefill_devices: int, decode_devices: int,
                     all_devices: int) -> dict:
    """The cost figures of a deployment (empty for a profile without a price): a prefill step's time at the
    price of the devices that ran it, a decode step's likewise (a replica's tp x pp, a disaggregated pool's
    group), and the whole run's time at every device's price (the wall figure, idle replicas included)."""
    from backend.results.cost import cost_figures
    price = profile.price_per_hour
    if price is None:
        return {}
    figures = cost_figures(summary, price, prefill_devices)
    decode = cost_figures(summary, price, decode_devices)
    wall = cost_figures(summary, price, all_devices)
    figures.update(cost_decode_usd=decode["cost_decode_usd"], cost_per_m_output_usd=decode["cost_per_m_output_usd"],
                   cost_per_m_output_wall_usd=wall["cost_per_m_output_wall_usd"], price_per_hour=price * all_devices)
    return figures


def priced_text(profile: GpuProfile, devices: int) -> tuple[str, str]:
    """(what the price is for, its source) for run.json and the summary's cost line."""
    if devices == 1:
        return profile.name, profile.price_source
    return f"{devices} x {profile.name}", f"{devices} devices at ${profile.price_per_hour:g}/h each: {profile.price_source}"

"""The stage contract, checked when the config is loaded.

Every stage declares what it provides (:attr:`stages.base.Stage.columns`,
:attr:`stages.base.Stage.artifacts`) and what it reads from earlier stages
(its config's ``requires`` / ``requirements()``); the assembly declares what
it reads (:data:`ASSEMBLY_REQUIRES`). :func:`contract_errors` checks a typed
build config against those declarations, before any work: each problem is one
line naming the stages involved, e.g.
``langid.enabled: false, but heuristics reads its langid_lang (...): enable
langid, or disable heuristics too``.

At run time the executor checks the other half: a stage's ``process`` adds
exactly the columns it declares (``pipeline.executor``), and the build reads a
stage's fit only through its :class:`stages.base.FitResult`.
"""

from __future__ import annotations

from typing import Any

from stages import stage_class, stage_names
from stages.base import BASE_COLUMNS

#: What the assembly (``pipeline.assemble``) reads from the stages: name ->
#: why. Columns of the last table and values/files of the fits.
ASSEMBLY_REQUIRES: dict[str, str] = {
    "tokenize_input_ids": "packs its token ids",
    "mixture_repeats": "packs the copies it chooses",
    "tokenizer": "publishes it as tokenizer.json",
    "pad_id": "pads best-fit gaps with it",
    "planned_tokens": "checks the packed tokens against it",
}
#: Read by the assembly when a stage provides them (the report's
#: realized-against-target table), else left out.
ASSEMBLY_OPTIONAL: dict[str, str] = {
    "target_shares": "the realized share of each source against it",
}


def providers(plugins: tuple[str, ...] = ()) -> dict[str, str]:
    """Column or artifact name -> the stage that declares it.

    Raises:
        stages.RegistryError: two stages declare the same name.
    """
    from stages import RegistryError

    out: dict[str, str] = {}
    for name in stage_names(plugins):
        cls = stage_class(name, plugins)
        for what in (*cls.columns, *cls.artifacts):
            if what in out:
                raise RegistryError(f"{what!r} is provided by both {out[what]!r} and {name!r}")
            out[what] = name
    return out


def describe(plugins: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """What every stage declares, in build order (``python -m pipeline
    stages``): per stage ``name``, ``order``, ``module``, ``can_disable``
    (False, or why not), ``reads`` (name -> [why, providing stage or
    ``"base column"``], with the default options), ``columns`` (name ->
    ``{"dtype", "doc", "lineage"}``), ``artifacts`` (name -> what) and
    ``tally_columns`` (the columns its ``Stage.tally`` counts over; empty: no
    tally in the manifest and report).

    Raises:
        stages.RegistryError: a plugin cannot be imported, or two stages clash.
    """
    from stages import registry

    who = providers(plugins)
    out = []
    for name, path in registry(plugins).items():
        cls = stage_class(name, plugins)
        why = getattr(cls.Config, "required_by_build", None)
        reads = cls.Config.model_construct().requirements()
        out.append({
            "name": name, "order": cls.order, "module": path, "can_disable": True if not why else f"no: {why}",
            "reads": {what: [reason, who.get(what, "base column" if what in BASE_COLUMNS else "nobody")]
                      for what, reason in reads.items()},
            "columns": {col: {"dtype": spec.dtype, "doc": spec.doc, "lineage": spec.lineage}
                        for col, spec in cls.columns.items()},
            "artifacts": dict(cls.artifacts),
            "tally_columns": list(cls.tally_columns),
        })
    return out


def format_stages(stages: list[dict[str, Any]]) -> str:
    """Plain text of :func:`describe`: one block per stage."""
    lines = []
    for s in stages:
        can = "yes" if s["can_disable"] is True else s["can_disable"]
        lines.append(f"{s['order']:>5}  {s['name']}  ({s['module']}; can be disabled: {can})")
        for what, (why, by) in s["reads"].items():
            lines.append(f"       reads    {what} from {by}: {why}")
        for col, c in s["columns"].items():
            mark = " [lineage]" if c["lineage"] else ""
            lines.append(f"       column   {col} ({c['dtype']}){mark}: {c['doc']}")
        for what, doc in s["artifacts"].items():
            lines.append(f"       provides {what}: {doc}")
        if s.get("tally_columns"):
            lines.append(f"       tally    over {', '.join(s['tally_columns'])} (counts per source in the "
                         f"manifest's stages.{s['name']}.per_source.<source>.tally and in report.html)")
    lines.append("assembly reads " + ", ".join(f"{k} ({v})" for k, v in ASSEMBLY_REQUIRES.items()))
    return "\n".join(lines) + "\n"


def contract_errors(cfg: Any) -> list[str]:
    """One line per broken dependency of a typed build config.

    Checked, for every enabled stage and for the assembly: each name it reads
    is a base column or is provided by a stage that runs earlier (for the
    assembly: any stage) and is enabled. A stage that cannot be disabled
    (``RequiredStageConfig``) has no ``enabled`` key at all.
    """
    plugins = tuple(getattr(cfg, "plugins", ()) or ())
    names = stage_names(plugins)
    position = {name: i for i, name in enumerate(names)}
    who = providers(plugins)
    enabled = {name for name in names if getattr(cfg, name).enabled}
    errors: list[str] = []
    disabled_readers: dict[str, list[tuple[str, str, str]]] = {}
    for reader in names:
        if reader not in enabled:
            continue
        for what, why in getattr(cfg, reader).requirements().items():
            if what in BASE_COLUMNS:
                continue
            provider = who.get(what)
            if provider is not None and what in stage_class(provider, plugins).artifacts:
                errors.append(f"{reader}: reads {what} ({why}), an artifact of {provider}: a stage reads columns "
                              "(artifacts and exports are the assembly's)")
            elif provider is None:
                errors.append(f"{reader}: reads {what} ({why}), which no stage provides")
            elif position[provider] >= position[reader]:
                errors.append(f"{reader}: reads {what} ({why}) from {provider}, which runs after it "
                              f"(order {stage_class(provider, plugins).order} >= "
                              f"{stage_class(reader, plugins).order})")
            elif provider not in enabled:
                disabled_readers.setdefault(provider, []).append((reader, what, why))
    planner = who.get("planned_tokens")
    if planner is not None:
        for name in names:
            if name in enabled and position[name] > position[planner]:
                errors.append(f"{name}: runs after {planner} (order {stage_class(name, plugins).order} > "
                              f"{stage_class(planner, plugins).order}), whose plan of copies is what the assembly "
                              f"packs: give it an order below {stage_class(planner, plugins).order}")
    for what, why in ASSEMBLY_REQUIRES.items():
        provider = who.get(what)
        if provider is None:
            errors.append(f"the assembly reads {what} ({why}), which no stage provides")
        elif provider not in enabled:
            disabled_readers.setdefault(provider, []).append(("the assembly", what, why))
    for provider in names:
        readers = disabled_readers.get(provider)
        if not readers:
            continue
        what = "; ".join(f"{reader} reads its {col} ({why})" for reader, col, why in readers)
        optional = list(dict.fromkeys(r for r, _, _ in readers if r != "the assembly"
                                      and not getattr(stage_class(r, plugins).Config, "required_by_build", None)))
        also = f", or disable {' and '.join(optional)} too" if optional else ""
        errors.append(f"{provider}.enabled: false, but {what}: enable {provider}{also}")
    return errors

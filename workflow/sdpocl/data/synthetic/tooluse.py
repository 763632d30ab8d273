"""The ``tooluse`` domain (dataset ``tiny_tooluse``): ReAct-style tool calls over :data:`TOOLS`;
the completion ends with ``Action: name`` / ``Action Input: {json}`` (twice for a two-call request,
``data.difficulty.tooluse_calls: 2``)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

from sdpocl.data.synthetic.common import Difficulty, _record, _stable_int

#: name -> (argument names, description)
TOOLS: dict[str, tuple[tuple[str, ...], str]] = {
    "get_weather": (("city",), "Get the current weather in a city."),
    "convert_currency": (("amount", "source", "target"), "Convert an amount of money from one currency to another."),
    "search_web": (("query",), "Search the web for a query."),
    "set_alarm": (("hour",), "Set an alarm for an hour of the day."),
}

_CITIES = (
    "Paris",
    "London",
    "Tokyo",
    "Berlin",
    "Madrid",
    "Rome",
    "Cairo",
    "Lima",
    "Oslo",
    "Delhi",
    "Sydney",
    "Toronto",
    "Moscow",
    "Beijing",
    "Mumbai",
    "Lagos",
    "Dallas",
    "Perth",
    "Bergen",
    "Porto",
    "Kyoto",
    "Osaka",
    "Hanoi",
    "Munich",
)
_CURRENCIES = ("USD", "EUR", "GBP", "JPY", "CNY", "INR", "CAD", "CHF")
_AMOUNTS = (10, 20, 50, 100, 200, 500)
_QUERIES = (
    "pasta recipes",
    "cheap flights",
    "chess openings",
    "solar panels",
    "jazz history",
    "running shoes",
    "python lists",
    "moon phases",
    "yoga poses",
    "bird songs",
    "train times",
    "tax rules",
    "dog training",
    "sushi places",
    "car insurance",
    "pizza dough",
    "desk lamps",
    "tennis rules",
    "coffee beans",
    "ski resorts",
    "movie times",
    "museum hours",
    "guitar chords",
    "rain boots",
)
#: 24 cities, 24 queries, 23 hours and 7-8 wordings give every tool at least ~160 distinct prompts, so
#: a 500-prompt train split holds each tool about equally (with 12 values and 3-4 wordings the other tools
#: ran out of prompts and `convert_currency` filled 84% of it, against 62% of the test split)
_HOURS = tuple(range(1, 24))

_TOOL_TEMPLATES: dict[str, tuple[str, ...]] = {
    "get_weather": (
        "What is the weather in {city}?",
        "Tell me the weather in {city} today.",
        "Is it raining in {city}?",
        "How warm is it in {city} right now?",
        "What's the forecast for {city}?",
        "Check the weather in {city}.",
        "Will it snow in {city} tomorrow?",
        "Do I need an umbrella in {city}?",
    ),
    "convert_currency": (
        "Convert {amount} {source} to {target}.",
        "How much is {amount} {source} in {target}?",
        "Exchange {amount} {source} for {target}.",
    ),
    "search_web": (
        "Search the web for {query}.",
        "Find information about {query}.",
        "Look up {query} online.",
        "Search for {query}.",
        "Can you look up {query}?",
        "Web search: {query}.",
        "Find me pages on {query}.",
    ),
    "set_alarm": (
        "Set an alarm for {hour} o'clock.",
        "Wake me up at {hour} o'clock.",
        "Please set an alarm at {hour}.",
        "Alarm at {hour} o'clock, please.",
        "I need an alarm at {hour}.",
        "Ring me at {hour} o'clock.",
        "Set my alarm to {hour}.",
    ),
}

#: Signatures only (descriptions in :data:`TOOLS` stay documentation): a short prompt keeps the
#: tool-use stage, whose prompts are the longest, affordable on a CPU.
_TOOLUSE_HEADER = (
    "Tools: "
    + ", ".join(f"{name}({', '.join(args)})" for name, (args, _desc) in TOOLS.items())
    + ".\nAnswer with Thought, Action and Action Input.\nRequest: "
)


def _tool_arg_sets(name: str) -> Iterator[dict[str, Any]]:
    if name == "get_weather":
        for c in _CITIES:
            yield {"city": c}
    elif name == "convert_currency":
        for amount in _AMOUNTS:
            for src in _CURRENCIES:
                for tgt in _CURRENCIES:
                    if src != tgt:
                        yield {"amount": amount, "source": src, "target": tgt}
    elif name == "search_web":
        for q in _QUERIES:
            yield {"query": q}
    elif name == "set_alarm":
        for h in _HOURS:
            yield {"hour": h}
    else:  # pragma: no cover - TOOLS and this function are kept in sync
        raise AssertionError(name)


#: ``tooluse_args: computed``: a country and its capital (the capital is the argument). Twelve capitals
#: of :data:`_CITIES` and twelve new ones, none of tool_schema2's unseen cities (benchmarks._MORE_CITIES)
_CAPITALS: dict[str, str] = {
    "France": "Paris",
    "England": "London",
    "Japan": "Tokyo",
    "Germany": "Berlin",
    "Spain": "Madrid",
    "Italy": "Rome",
    "Egypt": "Cairo",
    "Peru": "Lima",
    "Norway": "Oslo",
    "Russia": "Moscow",
    "China": "Beijing",
    "Vietnam": "Hanoi",
    "Canada": "Ottawa",
    "Australia": "Canberra",
    "Sweden": "Stockholm",
    "Denmark": "Copenhagen",
    "Belgium": "Brussels",
    "Hungary": "Budapest",
    "Turkey": "Ankara",
    "Iran": "Tehran",
    "Iraq": "Baghdad",
    "Venezuela": "Caracas",
    "Chile": "Santiago",
    "Colombia": "Bogota",
}
#: ``tooluse_lists: long``: 24 more countries, none of whose capitals is in :data:`_CITIES` or tool_schema2's
#: unseen cities (benchmarks._MORE_CITIES)
_MORE_CAPITALS: dict[str, str] = {
    "Netherlands": "Amsterdam",
    "Switzerland": "Bern",
    "Romania": "Bucharest",
    "Bulgaria": "Sofia",
    "Serbia": "Belgrade",
    "Croatia": "Zagreb",
    "Ukraine": "Kyiv",
    "Iceland": "Reykjavik",
    "Brazil": "Brasilia",
    "Uruguay": "Montevideo",
    "Morocco": "Rabat",
    "Ghana": "Accra",
    "Nigeria": "Abuja",
    "Pakistan": "Islamabad",
    "Nepal": "Kathmandu",
    "Indonesia": "Jakarta",
    "Lebanon": "Beirut",
    "Jordan": "Amman",
    "Latvia": "Riga",
    "Estonia": "Tallinn",
    "Sudan": "Khartoum",
    "Uganda": "Kampala",
    "Bangladesh": "Dhaka",
    "Qatar": "Doha",
}
#: ``tooluse_lists: long``: 32 more queries, none of tool_schema2's unseen ones (benchmarks._MORE_QUERIES)
_LONG_QUERIES = (
    "hiking trails",
    "wine regions",
    "board games",
    "photo editing",
    "baby names",
    "plant care",
    "home loans",
    "job listings",
    "bus routes",
    "hotel deals",
    "salad ideas",
    "soup recipes",
    "fishing spots",
    "knitting patterns",
    "camping gear",
    "phone plans",
    "math puzzles",
    "poetry books",
    "surf reports",
    "ferry times",
    "flower shows",
    "cake designs",
    "wood carving",
    "harbor tours",
    "cheese shops",
    "laptop bags",
    "piano scales",
    "travel visas",
    "beach towns",
    "cloud types",
    "space news",
    "card tricks",
)
#: currency names as a request words them -> the ISO code the tool takes
_CURRENCY_NAMES: dict[str, str] = {
    "dollars": "USD",
    "euros": "EUR",
    "pounds": "GBP",
    "yen": "JPY",
    "yuan": "CNY",
    "rupees": "INR",
    "francs": "CHF",
    "rubles": "RUB",
}
#: (hour on a 12-hour clock, "am" / "pm") -> the 24-hour ``hour``: 1-11 am and 1-11 pm
_CLOCK = tuple((h, half) for half in ("am", "pm") for h in range(1, 12))
#: ``tooluse_lists: long`` and ``clock``: the day's half in words too: 1-11 in the morning, 1-5 in the
#: afternoon, 6-11 in the evening (22 more clock times)
_CLOCK_WORDS = (
    tuple((h, "in the morning") for h in range(1, 12))
    + tuple((h, "in the afternoon") for h in range(1, 6))
    + tuple((h, "in the evening") for h in range(6, 12))
)

_COMPUTED_TEMPLATES: dict[str, tuple[str, ...]] = {
    "get_weather": (
        "What is the weather in the capital of {country}?",
        "Tell me the weather in the capital of {country} today.",
        "Is it raining in the capital of {country}?",
        "How warm is it in the capital of {country} right now?",
        "What's the forecast for the capital of {country}?",
        "Check the weather in the capital of {country}.",
        "Will it snow in the capital of {country} tomorrow?",
        "Do I need an umbrella in the capital of {country}?",
    ),
    "convert_currency": (
        "Convert {amount} {source_name} to {target_name}.",
        "How much is {amount} {source_name} in {target_name}?",
        "Exchange {amount} {source_name} for {target_name}.",
    ),
    "search_web": _TOOL_TEMPLATES["search_web"],
    "set_alarm": (
        "Set an alarm for {clock} {half}.",
        "Wake me up at {clock} {half}.",
        "Please set an alarm at {clock} {half}.",
        "Alarm at {clock} {half}, please.",
        "I need an alarm at {clock} {half}.",
        "Ring me at {clock} {half}.",
        "Set my alarm to {clock} {half}.",
    ),
}


#: ``tooluse_lists: long`` and ``clock``: two more set-alarm wordings (9 x 44 clock times: ~75 test requests)
_MORE_ALARM_TEMPLATES = (
    "Can you wake me at {clock} {half}?",
    "Make an alarm for {clock} {half}.",
)


#: the ``tooluse_lists`` values that give set_alarm :data:`_CLOCK_WORDS` and :data:`_MORE_ALARM_TEMPLATES`
_LONG_ALARM_LISTS = ("long", "clock")


def _computed_arg_sets(name: str, lists: str = "short") -> Iterator[tuple[dict[str, Any], dict[str, Any], str]]:
    """(template fields, tool arguments, the Thought's working) of every request of a tool whose
    arguments the model must compute: look up a capital or a currency code, convert a 12-hour time.
    ``lists: long`` adds :data:`_MORE_CAPITALS`, :data:`_LONG_QUERIES` and :data:`_CLOCK_WORDS`; ``lists: clock``
    adds :data:`_CLOCK_WORDS` only (set_alarm's hours are digits, which a re-prompted teacher reads from a
    demonstration; the tiny base does not copy a new query or capital:
    docs/experiments/2026-12-06-row-53-copying-probe.md)."""
    long = lists == "long"
    clock_words = lists in _LONG_ALARM_LISTS
    if name == "get_weather":
        for country, city in {**_CAPITALS, **(_MORE_CAPITALS if long else {})}.items():
            yield {"country": country}, {"city": city}, f"capital of {country} is {city}; "
    elif name == "convert_currency":
        for amount in _AMOUNTS:
            for src, src_code in _CURRENCY_NAMES.items():
                for tgt, tgt_code in _CURRENCY_NAMES.items():
                    if src != tgt:
                        fields = {"amount": amount, "source_name": src, "target_name": tgt}
                        args = {"amount": amount, "source": src_code, "target": tgt_code}
                        yield fields, args, f"{src} {src_code}, {tgt} {tgt_code}; "
    elif name == "search_web":
        for q in _QUERIES + (_LONG_QUERIES if long else ()):
            yield {"query": q}, {"query": q}, ""
    elif name == "set_alarm":
        for clock, half in _CLOCK + (_CLOCK_WORDS if clock_words else ()):
            hour = clock + (0 if half in ("am", "in the morning") else 12)
            yield {"clock": clock, "half": half}, {"hour": hour}, f"{clock} {half} is {hour}; "
    else:  # pragma: no cover - TOOLS and this function are kept in sync
        raise AssertionError(name)


#: ``tooluse_calls: 2``: how a two-call request joins its two requests; ``{second}`` starts lowercased
#: where the wording goes on mid-sentence (:func:`_lower_first`)
_JOINS = ("{first} {second}", "{first} Also, {second}", "{first} After that, {second}")
#: ``tooluse_calls: 2``: two-call requests drawn per ordered pair of distinct tools (12 pairs: 3,072
#: requests, 768 per first tool, ~610 of them in train: the default warm-up's ~340 examples per group
#: repeat none)
_PAIRS_PER_ORDERED_PAIR = 256


def _lower_first(request: str) -> str:
    """``request`` with its first letter lowercased, as it reads after "Also, " ("I need ..." kept)."""
    return request if request.startswith("I ") else request[0].lower() + request[1:]


def _cases(name: str, difficulty: Difficulty) -> list[tuple[str, dict[str, Any], dict[str, Any], str]]:
    """(template, template fields, tool arguments, the Thought's working) of every single request of a tool."""
    if difficulty.tooluse_args == "computed":
        templates = _COMPUTED_TEMPLATES[name]
        if difficulty.tooluse_lists in _LONG_ALARM_LISTS and name == "set_alarm":
            templates += _MORE_ALARM_TEMPLATES
        return [
            (template, fields, args, work)
            for template in templates
            for fields, args, work in _computed_arg_sets(name, difficulty.tooluse_lists)
        ]
    return [(template, args, args, "") for template in _TOOL_TEMPLATES[name] for args in _tool_arg_sets(name)]


def _call_record(prompt: str, calls: list[tuple[str, dict[str, Any], str]]) -> dict[str, Any]:
    """The record of a request for ``calls`` ((tool, arguments, the Thought's working), in order): the
    Thought holds every working, then each call follows; the answer lists the tools and merges the
    arguments (ToolAlpaca's rule, :func:`sdpocl.rewards.tooluse.tooluse_reward`)."""
    names = [name for name, _args, _work in calls]
    thought = "".join(work for _name, _args, work in calls) + "use " + " and ".join(names)
    actions = "\n".join(f"Action: {name}\nAction Input: {json.dumps(args)}" for name, args, _work in calls)
    answer = json.dumps({"actions": names, "input": {k: v for _name, args, _work in calls for k, v in args.items()}})
    return _record(prompt, answer, "tooluse", f" <think>{thought}</think> {actions}")


def _two_call_records(
    cases: dict[str, list[tuple[str, dict[str, Any], dict[str, Any], str]]], tooluse_args: str
) -> list[tuple[str, dict[str, Any]]]:
    """(group, record) of the two-call requests: for each ordered pair of distinct tools,
    :data:`_PAIRS_PER_ORDERED_PAIR` distinct requests, each two single requests (any wording, any
    arguments, uniformly drawn) joined by one of :data:`_JOINS`, with a ``random.Random`` seeded by a
    SHA-256 of ``tooluse_args`` (the full cross product has millions of requests). The Thought holds
    both workings, then both calls follow in the request's order; the answer merges both inputs
    (the tools' argument names are disjoint, so :func:`sdpocl.rewards.tooluse.tooluse_reward` checks
    both). Grouped by the first tool (``"get_weather+"``): see :func:`_tooluse_universe`."""
    rng = random.Random(_stable_int("sdpocl-tooluse-two-calls", tooluse_args))
    out = []
    for name1 in TOOLS:
        for name2 in TOOLS:
            if name1 == name2:
                continue
            seen: set[str] = set()
            while len(seen) < _PAIRS_PER_ORDERED_PAIR:
                template1, fields1, args1, work1 = rng.choice(cases[name1])
                template2, fields2, args2, work2 = rng.choice(cases[name2])
                join = rng.choice(_JOINS)
                second = template2.format(**fields2)
                if join != "{first} {second}":
                    second = _lower_first(second)
                prompt = _TOOLUSE_HEADER + join.format(first=template1.format(**fields1), second=second)
                if prompt in seen:
                    continue
                seen.add(prompt)
                out.append((f"{name1}+", _call_record(prompt, [(name1, args1, work1), (name2, args2, work2)])))
    return out


def _tooluse_universe(difficulty: Difficulty) -> list[tuple[Any, dict[str, Any]]]:
    """Every request, grouped by tool. ``tooluse_args: copied``: the request names each argument;
    ``computed``: the Thought works each one out first (:func:`_computed_arg_sets`).

    ``tooluse_calls: 2`` (BFCL's "multiple" / "parallel multiple" categories): the single requests and
    as many groups of two-call requests (:func:`_two_call_records`), one per first tool. Sampling
    (:func:`sdpocl.data.synthetic.sampling.generate`) takes one request from each group per round, so
    four single groups (by tool) and four two-call groups (by first tool, the second drawn evenly from
    the other three) give every split and the SFT warm-up half single and half two-call requests, and
    every tool about equally (a quarter of the singles, of the first and of the second calls); grouping
    the pairs by ordered pair instead would make 12 of 16 groups, three quarters of the requests, pairs."""
    cases = {name: _cases(name, difficulty) for name in TOOLS}
    out: list[tuple[Any, dict[str, Any]]] = []
    for name in TOOLS:
        for template, fields, args, work in cases[name]:
            prompt = _TOOLUSE_HEADER + template.format(**fields)
            out.append((name, _call_record(prompt, [(name, args, work)])))
    if difficulty.tooluse_calls == 2:
        out.extend(_two_call_records(cases, difficulty.tooluse_args))
    return out

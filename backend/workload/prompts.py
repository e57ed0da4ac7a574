"""The real-text prompts that workloads with `prompt_source = "text"` draw from.

Written for this project: short questions, coding asks, passages to summarize, translations
and longer-context asks, so that prompt lengths and outputs vary the way a chat service's do.
"""
from __future__ import annotations

PROMPTS: tuple[str, ...] = (
    # Short questions.
    "What is the capital of France?",
    "Why is the sky blue during the day but red at sunset?",
    "How many minutes are there in a week? Show the arithmetic.",
    "Name three animals that hibernate and explain briefly why they do it.",
    "What is the difference between weather and climate?",
    "Is a tomato a fruit or a vegetable? Give the botanical and the culinary answer.",
    "Give me five ideas for a rainy Sunday afternoon with two children.",
    "Explain what a leap year is and why we need one.",
    # Coding asks.
    "Write a Python function that returns the n-th Fibonacci number using iteration, with a docstring.",
    "Write a SQL query that lists the ten customers with the highest total order value from tables "
    "customers(id, name) and orders(id, customer_id, amount).",
    "Explain what this shell command does, step by step: find . -name '*.log' -mtime +7 -delete",
    "In Python, what is the difference between a list and a tuple? When would you choose each?",
    "Write a short JavaScript function that removes duplicate values from an array while keeping their order.",
    "My Python script fails with 'IndexError: list index out of range' inside a for loop that deletes items "
    "from the list it iterates over. Why does that happen and how do I fix it?",
    "Write a regular expression that matches dates written as YYYY-MM-DD and explain each part of it.",
    # Summaries of short passages.
    "Summarize the following passage in two sentences.\n\n"
    "The town of Hollowmere sits at the bend of a slow brown river. For three centuries its people made "
    "their living from barges that carried grain downstream to the coast. When the railway arrived in 1871 "
    "the barges lost their trade within a decade, and half the town's families moved away. Those who stayed "
    "turned the empty warehouses into workshops for furniture makers, and today Hollowmere is known across "
    "the region for oak tables built the way they were a hundred years ago.",
    "Summarize this memo for a busy manager in three bullet points.\n\n"
    "From next Monday the office on the second floor will be closed for two weeks while the heating system "
    "is replaced. Teams that normally sit there will move to the meeting rooms on the fourth floor, which "
    "therefore cannot be booked for meetings during that time. Please take laptops and personal items home "
    "on Friday evening. The kitchen on the second floor stays open, but the coffee machine will be moved "
    "upstairs. Questions go to the facilities desk, extension 4410.",
    "Read the passage and state its main argument in one sentence.\n\n"
    "Many people believe that learning a second language as an adult is nearly impossible, yet studies of "
    "adult learners show steady progress when practice is daily and spoken. Children seem to learn faster "
    "mainly because they spend many hours a day surrounded by the language and are not afraid of mistakes. "
    "An adult who recreates those conditions, even for thirty minutes a day, often reaches a comfortable "
    "conversational level within two years.",
    # Translations.
    "Translate into French: 'The train to the airport leaves every twenty minutes from platform four.'",
    "Translate into Spanish: 'Could you please tell me where the nearest pharmacy is? I think I have a cold.'",
    "Translate into German and then back into English, noting any change in meaning: "
    "'We will decide after lunch whether to walk to the lake or take the bus.'",
    "Translate this short note into plain English: 'Merci pour votre aide hier soir, "
    "sans vous nous aurions manqué le dernier train.'",
    # Writing and reasoning.
    "Write a four-line poem about a lighthouse keeper who has never seen the sea in daylight.",
    "A farmer has 17 sheep and all but 9 run away. How many are left? Explain the trick in the question.",
    "Draft a polite email to a neighbour asking them to trim a hedge that blocks the footpath.",
    "Compare renting and buying a home in a short table with three rows: cost, flexibility, risk.",
    # Longer-context asks.
    "Here are the notes from a project meeting. List every decision and every open question separately.\n\n"
    "Anna opened by saying the mobile app release slips to the 14th because the payment provider changed "
    "its test environment. Ben suggested shipping without the new checkout and adding it in a later update; "
    "the group agreed to that. Chloe asked who owns the translation of the help pages; nobody knew, and it "
    "was left for Anna to find out. David reported that crash reports fell by a third since the last build. "
    "The team decided to keep the weekly release rhythm after launch. Chloe raised whether the old web "
    "dashboard can be switched off in March, which depends on how many customers still use it; Ben will "
    "pull the numbers. The meeting ended with a reminder that the office is closed on Friday.",
    "Answer the question using only the text below. Question: why did the bridge close?\n\n"
    "The Marlow footbridge, opened in 1932, carried walkers and cyclists across the canal for ninety years. "
    "Inspectors in 2021 found that salt spread on the deck each winter had corroded the steel beneath the "
    "paving slabs. Repairs were planned for the following summer, but a second inspection showed the damage "
    "reached the supports as well, and the council closed the bridge while it raised money for a "
    "replacement. A temporary ferry now runs at weekends. The new bridge, of weathering steel with a timber "
    "deck, is due to open next spring.",
    "Below is a description of a small program. Point out the likely bug and propose a fix.\n\n"
    "A script reads a CSV file of temperatures, one reading per line with a timestamp and a value in "
    "degrees Celsius. It keeps a running total and a count, and at the end prints the average. Users report "
    "that when the file contains an empty line at the end, the script crashes with a ValueError, and when a "
    "sensor reports the text 'NaN' the average printed is nan. The author wants empty lines skipped and "
    "missing readings left out of the average, with a count of how many were skipped.",
    "Explain the story below to a ten-year-old, then give it a title.\n\n"
    "Once a year the birds of the valley held a contest to choose who would lead the flight south. The eagle "
    "flew highest, the swallow flew fastest, and the owl could see in the dark. Each was sure of winning. "
    "But when the first storm came, the birds found that the eagle tired quickly, the swallow lost its way "
    "and the owl slept through the morning. It was the old grey goose, who had made the journey forty times, "
    "that led them safely over the mountains, calling to the young ones at the back so that none were lost.",
)

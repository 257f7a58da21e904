"""Writes tales.txt, the demo's training text: short generated fables.

The text is produced here from a small grammar (names, places, events and
morals combined at random with a fixed seed), so the repository ships its
data without borrowing anyone's prose. Run it again to regenerate:

    python examples/data/make_tales.py
"""

import random
from pathlib import Path

NAMES = ["Ada", "Basil", "Clara", "Dorian", "Edith", "Felix", "Greta", "Hugo", "Iris", "Jonah", "Kira", "Leo",
         "Mira", "Nils", "Olga", "Pavel", "Quinn", "Rosa", "Silas", "Tess"]
CREATURES = ["fox", "heron", "badger", "otter", "crow", "hare", "wolf", "owl", "mole", "stag", "wren", "toad"]
PLACES = ["the mill by the river", "the old stone bridge", "the edge of the pine wood", "the lighthouse",
          "the market square", "a hill of heather", "the frozen lake", "the orchard behind the inn",
          "the lantern maker's shop", "a valley full of fog"]
SEASONS = ["in the first days of spring", "one grey autumn morning", "on the longest night of winter",
           "at the height of summer", "when the rains came early"]
WANTS = ["a silver key", "the recipe for plum bread", "a map of the northern roads", "a song nobody remembered",
         "the name of a star", "a boat that would not sink", "a warm coat for the winter", "a lost brass bell"]
HELPS = ["shared half of a loaf", "mended a torn sail", "carried water up the hill", "sang until the storm passed",
         "counted the stars aloud", "lit every lamp on the street", "built a fence of willow", "waited without a word"]
TURNS = ["But the road was longer than it looked.", "Nobody believed the story at first.",
         "The wind changed, and with it the plan.", "Then the bridge gave way beneath them.",
         "A stranger laughed and offered a trade.", "Night fell before the work was done."]
MORALS = ["Patience opens more doors than force.", "A kindness given is never wasted.",
          "Those who listen learn the most.", "Small hands can move large stones together.",
          "The long way round is sometimes the only way home.", "Pride weighs more than any pack."]


def tale(rng: random.Random) -> str:
    hero, friend = rng.sample(NAMES, 2)
    beast = rng.choice(CREATURES)
    place, season, want = rng.choice(PLACES), rng.choice(SEASONS), rng.choice(WANTS)
    lines = [
        f"{season.capitalize()}, {hero} set out from {place} to find {want}.",
        f"On the way {hero} met {friend} and a {beast} who had lost its way.",
        f"{friend} {rng.choice(HELPS)}, and the {beast} {rng.choice(HELPS)}.",
        rng.choice(TURNS),
        f"\"We will not turn back,\" said {hero}. \"Not for {rng.randint(2, 12)} storms.\"",
        f"So they {rng.choice(HELPS)}, and at last they found {want} near {rng.choice(PLACES)}.",
        f"Moral: {rng.choice(MORALS)}",
    ]
    return " ".join(lines)


def main(n: int = 800, seed: int = 1234) -> None:
    rng = random.Random(seed)
    text = "\n\n".join(tale(rng) for _ in range(n)) + "\n"
    out = Path(__file__).with_name("tales.txt")
    out.write_text(text)
    print(f"wrote {out} ({len(text)} characters, {len(set(text))} distinct)")


if __name__ == "__main__":
    main()

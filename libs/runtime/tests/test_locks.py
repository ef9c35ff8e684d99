import asyncio

from tollgate.runtime.locks import KeyedLocks


async def test_one_holder_per_key_and_other_keys_run_freely() -> None:
    locks: KeyedLocks[str] = KeyedLocks()
    inside: dict[str, int] = {"a": 0, "b": 0}
    most: dict[str, int] = {"a": 0, "b": 0}
    b_ran_while_a_held = asyncio.Event()

    async def work(key: str) -> None:
        async with locks.hold(key):
            inside[key] += 1
            most[key] = max(most[key], inside[key])
            if key == "a":
                await asyncio.wait_for(b_ran_while_a_held.wait(), 5)  # "b" gets in while "a" is held
            else:
                b_ran_while_a_held.set()
            await asyncio.sleep(0)
            inside[key] -= 1

    await asyncio.gather(*(work("a") for _ in range(5)), work("b"), work("b"))
    assert most == {"a": 1, "b": 1}
    assert len(locks) == 0, "a lock outlived its last holder"


async def test_a_failing_holder_releases_the_key() -> None:
    locks: KeyedLocks[str] = KeyedLocks()

    async def fail() -> None:
        async with locks.hold("a"):
            raise RuntimeError("boom")

    results = await asyncio.gather(fail(), fail(), return_exceptions=True)
    assert [type(r) for r in results] == [RuntimeError, RuntimeError]
    async with asyncio.timeout(5):
        async with locks.hold("a"):
            pass
    assert len(locks) == 0

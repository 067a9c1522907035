#!/usr/bin/env python3
"""A TCP relay on 127.0.0.1 that delays everything the client sends by DELAY_MS, to
measure a load against a bucket as far away as a real one (round trips of milliseconds)
with the local S3 store of `.ci/s3-store`, which answers in microseconds.

    python3 bench/lag_proxy.py LISTEN_PORT STORE_PORT DELAY_MS

Each chunk is forwarded DELAY_MS after it arrived, chunks of one connection in order
and pipelined (a latency, not a bandwidth limit); replies pass at once. See
bench/README.md for the bucket load it was written for.
"""
import asyncio
import sys
import time


async def lagged(reader, writer, delay):
    queue = asyncio.Queue()

    async def receive():
        while True:
            data = await reader.read(1 << 16)
            await queue.put((time.monotonic(), data))
            if not data:
                return

    async def send():
        while True:
            arrived, data = await queue.get()
            wait = arrived + delay - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                writer.close()
                return
            writer.write(data)
            await writer.drain()

    try:
        await asyncio.gather(receive(), send())
    except (ConnectionError, asyncio.IncompleteReadError):
        writer.close()


async def plain(reader, writer):
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    writer.close()


async def main():
    listen, target, delay = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1000

    async def relay(client_reader, client_writer):
        store_reader, store_writer = await asyncio.open_connection("127.0.0.1", target)
        await asyncio.gather(lagged(client_reader, store_writer, delay),
                             plain(store_reader, client_writer))

    server = await asyncio.start_server(relay, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    asyncio.run(main())

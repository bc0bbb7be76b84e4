# thread_switches.py N TRUTH: four threads, two pairs handing work to each other through queues
# (json between hand-offs on one side, hashing on the other), N hand-offs a pair: some hundred
# thousand context switches a second. Writes the ground truth as JSON: the threads' own run and
# wait totals (each thread's /proc/thread-self/schedstat as it ends, the main thread's at the
# end: time on a CPU, and time runnable waiting for one), in ms.
import hashlib, json, queue, sys, threading

N = int(sys.argv[1])
totals = {"run_ms": 0.0, "wait_ms": 0.0}
lock = threading.Lock()


def account():
    run, wait, _ = open("/proc/thread-self/schedstat").read().split()
    with lock:
        totals["run_ms"] += int(run) / 1e6
        totals["wait_ms"] += int(wait) / 1e6


def pair():
    a, b = queue.Queue(), queue.Queue()

    def ping():
        for i in range(N):
            json.dumps({"i": i, "v": list(range(20))})
            a.put(i)
            b.get()
        account()

    def pong():
        for i in range(N):
            a.get()
            hashlib.sha256(str(i).encode() * 50).hexdigest()
            b.put(i)
        account()

    return [threading.Thread(target=ping), threading.Thread(target=pong)]


threads = pair() + pair()
for t in threads:
    t.start()
for t in threads:
    t.join()
account()
with open(sys.argv[2], "w") as out:
    json.dump(totals, out)

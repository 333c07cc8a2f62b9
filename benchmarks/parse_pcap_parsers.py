"""The parsers benchmarks/parse_pcap.py compares, each the code of a child process.

Each runs as `python -c CODE PCAP LIMIT`, extracts the same fields into a pandas
DataFrame and prints one JSON line: {"packets": n, "seconds": s, "cpu_seconds": c,
"maxrss_kb": k} (tshark's adds its own and the reader's peak RSS).
"""
FIELDS = ["t", "src", "dst", "sport", "dport", "seq", "ack", "flags", "payload_len"]

PARSERS = {
    "project": """
        import sys, time, json, resource
        from incastlab.analysis.pcap import read_pcap
        t, c = time.perf_counter(), time.process_time()
        df = read_pcap(sys.argv[1], cache=False)
        df = df[["t", "src", "dst", "sport", "dport", "seq", "ack", "flags", "payload_len"]]
        dt, cpu = time.perf_counter() - t, time.process_time() - c
        print(json.dumps({"packets": len(df), "seconds": dt, "cpu_seconds": cpu,
                          "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
    """,
    "dpkt": """
        import sys, time, json, resource, socket
        import dpkt, pandas as pd
        t, c = time.perf_counter(), time.process_time()
        cols = {k: [] for k in ("t", "src", "dst", "sport", "dport", "seq", "ack", "flags",
                                "payload_len")}
        with open(sys.argv[1], "rb") as fh:
            for ts, buf in dpkt.pcap.Reader(fh):
                eth = dpkt.ethernet.Ethernet(buf)
                ip = eth.data
                if not isinstance(ip, dpkt.ip.IP) or not isinstance(ip.data, dpkt.tcp.TCP):
                    continue
                tcp = ip.data
                cols["t"].append(ts); cols["src"].append(ip.src); cols["dst"].append(ip.dst)
                cols["sport"].append(tcp.sport); cols["dport"].append(tcp.dport)
                cols["seq"].append(tcp.seq); cols["ack"].append(tcp.ack)
                cols["flags"].append(tcp.flags)
                cols["payload_len"].append(ip.len - ip.hl * 4 - tcp.off * 4)
        df = pd.DataFrame(cols)
        dt, cpu = time.perf_counter() - t, time.process_time() - c
        print(json.dumps({"packets": len(df), "seconds": dt, "cpu_seconds": cpu,
                          "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
    """,
    "scapy": """
        import sys, time, json, resource
        import pandas as pd
        from scapy.utils import PcapReader
        from scapy.layers.inet import IP, TCP
        limit = int(sys.argv[2])
        t, c = time.perf_counter(), time.process_time()
        rows = []
        with PcapReader(sys.argv[1]) as r:
            for i, p in enumerate(r):
                if i >= limit:
                    break
                if IP in p and TCP in p:
                    ip, tcp = p[IP], p[TCP]
                    rows.append((float(p.time), ip.src, ip.dst, tcp.sport, tcp.dport, tcp.seq,
                                 tcp.ack, int(tcp.flags), ip.len - ip.ihl * 4 - tcp.dataofs * 4))
        df = pd.DataFrame(rows, columns=["t", "src", "dst", "sport", "dport", "seq", "ack",
                                         "flags", "payload_len"])
        dt, cpu = time.perf_counter() - t, time.process_time() - c
        print(json.dumps({"packets": len(df), "seconds": dt, "cpu_seconds": cpu,
                          "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
    """,
    "tshark": """
        import sys, time, json, resource, subprocess, io
        import pandas as pd
        t, c = time.perf_counter(), time.process_time()
        cmd = ["tshark", "-n", "-r", sys.argv[1], "-o", "tcp.analyze_sequence_numbers:FALSE",
               "-o", "tcp.calculate_timestamps:FALSE", "-Y", "tcp", "-T", "fields",
               "-E", "separator=,", "-e", "frame.time_epoch", "-e", "ip.src", "-e", "ip.dst",
               "-e", "tcp.srcport", "-e", "tcp.dstport", "-e", "tcp.seq_raw",
               "-e", "tcp.ack_raw", "-e", "tcp.flags", "-e", "tcp.len"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        df = pd.read_csv(p.stdout, header=None, names=["t", "src", "dst", "sport", "dport",
                                                       "seq", "ack", "flags", "payload_len"])
        _, status, usage = __import__("os").wait4(p.pid, 0)
        dt = time.perf_counter() - t
        cpu = time.process_time() - c + usage.ru_utime + usage.ru_stime
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"packets": len(df), "seconds": dt, "cpu_seconds": cpu,
                          "maxrss_kb": own + usage.ru_maxrss, "tshark_maxrss_kb":
                          usage.ru_maxrss, "reader_maxrss_kb": own}))
    """,
}


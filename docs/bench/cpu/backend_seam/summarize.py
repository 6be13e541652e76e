import json, statistics, glob
O='/tmp/seambench'
rows=[('tg','decode_tokens_per_s','decode b1 syn12 (tok/s)'),('pp','prefill_tokens_per_s','prefill 512 syn12 (tok/s)'),('b8','decode_tokens_per_s','decode b8 syn12 (tok/s)'),('fp8','decode_tokens_per_s','decode b1 syn-ds3 FP8 (tok/s)')]
for k,f,name in rows:
    out=[]
    for v in ['before','after']:
        vals=[json.load(open(p))[f] for p in sorted(glob.glob(f'{O}/{k}-{v}-*.json'))]
        out.append((v,statistics.median(vals),vals))
    print(name, ' '.join(f"{v}: med {m:.1f} {['%.1f'%x for x in vals]}" for v,m,vals in out), 'ratio %.3f'%(out[1][1]/out[0][1]))
for v in ['before','after']:
    for p in sorted(glob.glob(f'{O}/fp8-{v}-*.json')):
        d=json.load(open(p)); print(v, 'fp8 ceiling ratio %.3f bw %.1f GB/s bytes/token %.0f MB'%(d['decode_ceiling_ratio'], d['bandwidth_bytes_per_s']/1e9, d['weight_bytes_per_token']/1e6))

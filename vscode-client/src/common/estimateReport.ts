// Pure: `torch-preflight estimate --format json` output -> a markdown report.
// Reads the documented fields (peak_bytes, breakdown, layers, assumptions, suggestions) and
// tolerates missing ones, so a newer server with more fields still renders.

export function formatBytes(bytes: unknown): string {
    if (typeof bytes !== 'number' || !Number.isFinite(bytes)) {
        return '—';
    }
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let value = bytes;
    let unit = 0;
    while (Math.abs(value) >= 1024 && unit < units.length - 1) {
        value /= 1024;
        unit += 1;
    }
    return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

export function formatCount(n: unknown): string {
    if (typeof n !== 'number' || !Number.isFinite(n)) {
        return '—';
    }
    if (n >= 1e9) return `${(n / 1e9).toFixed(1)}B`;
    if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
    if (n >= 1e3) return `${(n / 1e3).toFixed(1)}K`;
    return String(n);
}

function cell(value: unknown): string {
    return String(value ?? '').replace(/\|/g, '\\|').replace(/\r?\n/g, ' ');
}

function describe(item: unknown): string {
    if (typeof item === 'string') {
        return item;
    }
    if (item && typeof item === 'object') {
        const o = item as Record<string, unknown>;
        const text = o.message ?? o.text ?? o.description ?? o.name ?? o.remedy ?? o.key;
        const parts: string[] = [];
        if (text !== undefined) {
            parts.push(String(text));
        }
        if (o.value !== undefined && text !== o.value) {
            parts.push(`= ${String(o.value)}`);
        }
        const peak = o.peak_bytes ?? o.bytes;
        if (typeof peak === 'number') {
            parts.push(`(peak ${formatBytes(peak)})`);
        }
        const where = o.source ?? (o.line !== undefined ? `line ${String(o.line)}` : undefined);
        if (where !== undefined) {
            parts.push(`— ${String(where)}`);
        }
        return parts.length > 0 ? parts.join(' ') : JSON.stringify(item);
    }
    return String(item);
}

/** Renders one or more reports (the CLI may print a list, one per model). */
export function renderEstimateMarkdown(data: unknown, fileLabel: string): string {
    const reports = Array.isArray(data) ? data : data && typeof data === 'object' && Array.isArray((data as { models?: unknown }).models) ? (data as { models: unknown[] }).models : [data];
    const out: string[] = [`# VRAM estimate: ${fileLabel}`, ''];
    if (reports.length === 0 || reports.every((r) => !r || typeof r !== 'object')) {
        out.push('No model found in this file.');
        return out.join('\n') + '\n';
    }
    for (const raw of reports) {
        if (!raw || typeof raw !== 'object') {
            continue;
        }
        const r = raw as Record<string, unknown>;
        if (reports.length > 1 || typeof r.model === 'string') {
            out.push(`## ${cell(r.model ?? 'model')}`, '');
        }
        out.push(`**Peak ≈ ${formatBytes(r.peak_bytes)}**`);
        if (typeof r.budget_bytes === 'number') {
            out.push(` of ${formatBytes(r.budget_bytes)} budget${r.fits === false ? ' — **does not fit**' : r.fits === true ? ' — fits' : ''}`);
        }
        out.push('');
        const breakdown = r.breakdown;
        if (breakdown && typeof breakdown === 'object') {
            out.push('| Part | Memory |', '|---|---:|');
            for (const [key, value] of Object.entries(breakdown as Record<string, unknown>)) {
                out.push(`| ${cell(key.replace(/_/g, ' '))} | ${formatBytes(value)} |`);
            }
            out.push('');
        }
        const layers = Array.isArray(r.layers) ? (r.layers as Record<string, unknown>[]) : [];
        if (layers.length > 0) {
            out.push('| Layer | Type | Line | Params | Param memory | Activations |', '|---|---|---:|---:|---:|---:|');
            for (const layer of layers) {
                out.push(
                    `| ${cell(layer.name)} | ${cell(layer.type)} | ${cell(layer.line)} | ${formatCount(layer.params)} | ${formatBytes(layer.param_bytes)} | ${formatBytes(layer.activation_bytes)} |`,
                );
            }
            out.push('');
        }
        for (const [title, key] of [
            ['Assumptions', 'assumptions'],
            ['Suggestions', 'suggestions'],
        ] as const) {
            const items = r[key];
            const list = Array.isArray(items) ? items : items && typeof items === 'object' ? Object.entries(items).map(([k, v]) => ({ key: k, value: v })) : [];
            if (list.length > 0) {
                out.push(`### ${title}`, '', ...list.map((item) => `- ${describe(item)}`), '');
            }
        }
    }
    return out.join('\n') + '\n';
}

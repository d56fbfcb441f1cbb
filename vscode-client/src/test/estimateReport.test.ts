import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatBytes, formatCount, renderEstimateMarkdown } from '../common/estimateReport';

describe('renderEstimateMarkdown', () => {
    it('renders peak, breakdown, layers, assumptions and suggestions', () => {
        const md = renderEstimateMarkdown(
            {
                peak_bytes: 3 * 1024 ** 3,
                breakdown: { parameters: 1024 ** 2, optimizer_state: 2 * 1024 ** 2 },
                layers: [{ name: 'fc1', type: 'Linear', line: 7, params: 3_215_360, param_bytes: 12_861_440, activation_bytes: 1_048_576 }],
                assumptions: [{ key: 'batch_size', value: 64, source: 'train.py:12' }],
                suggestions: ['bf16 autocast'],
            },
            'train.py',
        );
        assert.match(md, /^# VRAM estimate: train\.py/);
        assert.match(md, /Peak ≈ 3\.0 GiB/);
        assert.match(md, /\| optimizer state \| 2\.0 MiB \|/);
        assert.match(md, /\| fc1 \| Linear \| 7 \| 3\.2M \| 12\.3 MiB \| 1\.0 MiB \|/);
        assert.match(md, /- batch_size = 64 — train\.py:12/);
        assert.match(md, /- bf16 autocast/);
    });

    it('says so when there is no model', () => {
        assert.match(renderEstimateMarkdown([], 'x.py'), /No model found/);
    });

    it('formats sizes and counts', () => {
        assert.equal(formatBytes(512), '512 B');
        assert.equal(formatBytes(1536), '1.5 KiB');
        assert.equal(formatBytes(undefined), '—');
        assert.equal(formatCount(1_600_000), '1.6M');
        assert.equal(formatCount(12), '12');
    });
});

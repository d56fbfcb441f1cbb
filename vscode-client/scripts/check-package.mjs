// Checks what `vsce package` would ship, and that the bundle loads and exports activate/deactivate.
// Run after `npm run build` (or `vscode:prepublish`).
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const vsce = path.join(root, 'node_modules', '.bin', process.platform === 'win32' ? 'vsce.cmd' : 'vsce');
const files = execFileSync(vsce, ['ls', '--no-dependencies'], { cwd: root, encoding: 'utf8' })
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter(Boolean);

const problems = [];
// The bundled server (`make vsix` fills bundled/libs): the launcher, the package with its rule
// pages, and its runtime dependencies, all pure Python.
const BUNDLED = ['bundled/tool/launch.py', 'bundled/libs/torch_preflight/__init__.py', 'bundled/libs/torch_preflight/docs/rules/TPF001.md'];
for (const dependency of ['parso', 'jedi', 'pygls', 'lsprotocol', 'rich', 'attrs', 'cattrs']) {
    BUNDLED.push(`bundled/libs/${dependency}/__init__.py`);
}
for (const required of ['package.json', 'README.md', 'LICENSE', 'dist/extension.js', ...BUNDLED]) {
    if (!files.includes(required)) problems.push(`missing from the package: ${required}`);
}
for (const file of files) {
    if (/^(src|node_modules|scripts|out)\//.test(file) || file.endsWith('.ts') || file.endsWith('.map') || file.endsWith('.vsix')) {
        problems.push(`should not be packaged: ${file}`);
    }
    if (/\.(so|pyd|dylib)$|(^|\/)__pycache__\/|\.pyc$|^bundled\/libs\/bin\//.test(file)) {
        problems.push(`should not be bundled (compiled, cached or a script for the build machine): ${file}`);
    }
}

// The bundle must be self-contained: only `vscode` (and Node built-ins) may stay external.
const require = createRequire(import.meta.url);
const Module = require('node:module');
const originalLoad = Module._load;
const externals = new Set();
Module._load = function (request, parent, isMain) {
    if (request === 'vscode') {
        externals.add(request);
        return new Proxy({}, { get: () => function stub() {} });
    }
    if (!request.startsWith('node:') && !Module.builtinModules.includes(request) && !request.startsWith('.') && !path.isAbsolute(request)) {
        problems.push(`bundle requires a module that is not bundled: ${request}`);
    }
    return originalLoad.call(this, request, parent, isMain);
};
const bundle = require(path.join(root, 'dist', 'extension.js'));
Module._load = originalLoad;
for (const name of ['activate', 'deactivate']) {
    if (typeof bundle[name] !== 'function') problems.push(`dist/extension.js does not export ${name}()`);
}

if (problems.length > 0) {
    console.error(problems.join('\n'));
    process.exit(1);
}
const bundled = files.filter((f) => f.startsWith('bundled/'));
console.log(`package ok: ${files.filter((f) => !f.startsWith('bundled/')).join(', ')}, and ${bundled.length} files of the bundled server`);

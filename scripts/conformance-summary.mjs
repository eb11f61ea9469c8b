// Summarises an http-cache-tests result file with the suite's own
// classification (lib/display.mjs determineTestResult, dependencies
// honoured), prints counts by result type and the failing required tests,
// and compares required passes with a baseline.
//
// usage: node conformance-summary.mjs SUITE_DIR RESULTS.json [BASELINE.json] [--write-baseline]
import fs from 'fs'
import path from 'path'
import { pathToFileURL } from 'url'

const [suiteDir, resultsFile, baselineFile] = process.argv.slice(2)
const writeBaseline = process.argv.includes('--write-baseline')
const imp = (p) => import(pathToFileURL(path.join(suiteDir, p)).href)

const tests = (await imp('tests/index.mjs')).default
const surrogate = (await imp('tests/surrogate-control.mjs')).default
tests.push(surrogate) // the CLI runs these too
const { determineTestResult } = await imp('lib/display.mjs')
const results = JSON.parse(fs.readFileSync(resultsFile, 'utf8'))

const names = {
  '✅': 'pass', '⛔️': 'fail', '⚠️': 'optional_fail', Y: 'yes', N: 'no',
  '🔹': 'setup_fail', '⁉️': 'harness_fail', '⚪️': 'dependency_fail', '↻': 'retry', '-': 'untested'
}
const counts = {}
const required = { total: 0, pass: 0 }
const failing = []
for (const suite of tests) {
  for (const test of suite.tests) {
    const type = names[determineTestResult(tests, test.id, results)[2]] || 'unknown'
    counts[type] = (counts[type] || 0) + 1
    if (test.kind === undefined || test.kind === 'required') {
      required.total++
      if (type === 'pass') required.pass++
      else failing.push({ id: test.id, suite: suite.id, type, name: test.name, detail: Array.isArray(results[test.id]) ? results[test.id][1] : '' })
    }
  }
}
const summary = { counts, required, required_pass_ratio: required.pass / required.total, failing_required: failing }
console.log(`result types: ${Object.entries(counts).map(([k, v]) => `${k} ${v}`).join(', ')}`)
console.log(`required tests passed: ${required.pass} of ${required.total} (${(100 * required.pass / required.total).toFixed(1)} %)`)
for (const f of failing) console.log(`  ${f.type.padEnd(15)} ${f.id}: ${f.name}${f.detail ? ' — ' + String(f.detail).slice(0, 120) : ''}`)
fs.writeFileSync(resultsFile.replace(/\.json$/, '-summary.json'), JSON.stringify(summary, null, 2) + '\n')

if (baselineFile) {
  if (writeBaseline) {
    fs.writeFileSync(baselineFile, JSON.stringify({ required_pass: required.pass, required_total: required.total }, null, 2) + '\n')
    console.log(`baseline written: ${required.pass}`)
  } else if (fs.existsSync(baselineFile)) {
    const base = JSON.parse(fs.readFileSync(baselineFile, 'utf8'))
    if (required.pass < base.required_pass) {
      console.log(`FAIL: required passes dropped from the baseline ${base.required_pass} to ${required.pass}`)
      process.exit(1)
    }
    console.log(`baseline ${base.required_pass}: ok`)
  }
}

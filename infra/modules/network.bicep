// Optional private networking (vnetEnabled): a virtual network with a subnet delegated to the Flex Consumption
// app (outbound VNet integration) and a subnet for private endpoints to the storage account (blob, queue, table),
// the SQL server and the Key Vault, each registered in its privatelink DNS zone linked to the network. DNS zone
// names come from environment(), so sovereign clouds get theirs.

@description('Virtual network name.')
param name string

@description('Azure region.')
param location string

@description('Tags for every resource.')
param tags object

@description('Address space of the network.')
param addressPrefix string

@description('Subnet for the function app (delegated to Microsoft.App/environments, as Flex Consumption requires).')
param appSubnetPrefix string

@description('Subnet for the private endpoints.')
param endpointSubnetPrefix string

@description('Storage account name.')
param storageAccountName string

@description('SQL logical server name.')
param sqlServerName string

@description('Key Vault name.')
param keyVaultName string

resource storage 'Microsoft.Storage/storageAccounts@2025-01-01' existing = {
  name: storageAccountName
}

resource sqlServer 'Microsoft.Sql/servers@2025-01-01' existing = {
  name: sqlServerName
}

resource vault 'Microsoft.KeyVault/vaults@2026-02-01' existing = {
  name: keyVaultName
}

var storageSuffix = environment().suffixes.storage
var endpoints = [
  {
    key: 'blob'
    group: 'blob'
    zone: 'privatelink.blob.${storageSuffix}'
  }
  {
    key: 'queue'
    group: 'queue'
    zone: 'privatelink.queue.${storageSuffix}'
  }
  {
    key: 'table'
    group: 'table'
    zone: 'privatelink.table.${storageSuffix}'
  }
  {
    key: 'sql'
    group: 'sqlServer'
    zone: 'privatelink${environment().suffixes.sqlServerHostname}'
  }
  {
    key: 'vault'
    group: 'vault'
    zone: 'privatelink${replace(environment().suffixes.keyvaultDns, '.vault.', '.vaultcore.')}'
  }
]

resource vnet 'Microsoft.Network/virtualNetworks@2025-05-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    addressSpace: {
      addressPrefixes: [
        addressPrefix
      ]
    }
    subnets: [
      {
        name: 'app'
        properties: {
          addressPrefix: appSubnetPrefix
          delegations: [
            {
              name: 'flex-consumption'
              properties: {
                serviceName: 'Microsoft.App/environments'
              }
            }
          ]
        }
      }
      {
        name: 'private-endpoints'
        properties: {
          addressPrefix: endpointSubnetPrefix
          privateEndpointNetworkPolicies: 'Disabled'
        }
      }
    ]
  }

  resource appSubnet 'subnets' existing = {
    name: 'app'
  }

  resource endpointSubnet 'subnets' existing = {
    name: 'private-endpoints'
  }
}

resource zones 'Microsoft.Network/privateDnsZones@2024-06-01' = [
  for e in endpoints: {
    name: e.zone
    location: 'global'
    tags: tags
  }
]

resource zoneLinks 'Microsoft.Network/privateDnsZones/virtualNetworkLinks@2024-06-01' = [
  for (e, i) in endpoints: {
    parent: zones[i]
    name: '${name}-link'
    location: 'global'
    tags: tags
    properties: {
      registrationEnabled: false
      virtualNetwork: {
        id: vnet.id
      }
    }
  }
]

resource privateEndpoints 'Microsoft.Network/privateEndpoints@2025-05-01' = [
  for e in endpoints: {
    name: '${name}-pe-${e.key}'
    location: location
    tags: tags
    properties: {
      subnet: {
        id: vnet::endpointSubnet.id
      }
      privateLinkServiceConnections: [
        {
          name: '${name}-pe-${e.key}'
          properties: {
            privateLinkServiceId: e.key == 'sql' ? sqlServer.id : (e.key == 'vault' ? vault.id : storage.id)
            groupIds: [
              e.group
            ]
          }
        }
      ]
    }
  }
]

resource zoneGroups 'Microsoft.Network/privateEndpoints/privateDnsZoneGroups@2025-05-01' = [
  for (e, i) in endpoints: {
    parent: privateEndpoints[i]
    name: 'default'
    properties: {
      privateDnsZoneConfigs: [
        {
          name: e.key
          properties: {
            privateDnsZoneId: zones[i].id
          }
        }
      ]
    }
  }
]

output appSubnetId string = vnet::appSubnet.id
